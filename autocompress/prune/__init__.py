"""The parent's weights ranked and cut: activation importance, permutation to prefix order, extraction of a student."""
