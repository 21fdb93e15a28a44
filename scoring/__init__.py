"""Evaluation rules: pure functions over case facts and a scoring spec, importing `domain` only."""
