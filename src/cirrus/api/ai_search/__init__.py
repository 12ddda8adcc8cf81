"""Cloudflare's AI Search (formerly AutoRAG) REST API: instances, their items (uploaded files), ingest jobs,
`search` (chunks only) and `chat/completions` (an answer with its sources)."""
