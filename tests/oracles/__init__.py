"""Reference implementations the product's fast paths are held to (never imported by product code)."""
