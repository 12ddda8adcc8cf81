"""Cirrus on many nodes: a node agent per Ray node owns that node's pool; the gateway places each request on a node
(`cirrus.placement`) and reaches it through Ray. Only `cirrus serve --cluster` imports this package's Ray parts:
the single-node path imports no Ray."""
