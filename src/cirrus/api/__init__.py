"""Protocol adapters: Workers AI and OpenAI. They translate and hold no logic."""
