"""The build's data: corpora, token rows, and the teacher's cached outputs."""
