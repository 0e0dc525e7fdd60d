"""The emulated network: one namespace and one `tc tbf`-shaped veth link per node (root only)."""
