"""What reviewers read: pure renderers from report dicts to Markdown and JSON (feasibility, build,
verify). Terminal rendering lives in ``cli``."""
