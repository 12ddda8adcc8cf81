"""Workers AI's REST API: /ai/run/{model} and /ai/models/search."""
