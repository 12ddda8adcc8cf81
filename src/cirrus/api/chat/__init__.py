"""Chat features both protocols share: tools, tool_choice, JSON mode and thinking switches in; reasoning,
content and tool calls out. Protocol-neutral: each adapter translates its own body into `ChatOptions` and the
parsed answer into its own fields."""
