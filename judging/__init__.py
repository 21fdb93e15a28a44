"""Judge runner: rubric prompts, providers, pairing, panels, claim checks (DESIGN §10)."""
