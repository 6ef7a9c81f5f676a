"""Filter → score → pick pipeline: contracts, registry, engine and one plugin per file."""
