"""Config: the parameter schema, defaults and bounds; the bounded YAML reader."""
