"""Network: the link profiles, and the emulated network (namespaces, shaped veth links, wire
counting)."""
