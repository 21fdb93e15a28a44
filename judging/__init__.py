"""Judge runner: rubric prompts, provider clients, pairing, panels, claim checks, agreement (DESIGN §10)."""
