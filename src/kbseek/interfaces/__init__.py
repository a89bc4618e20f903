"""The thin edges over ``KnowledgeBase``: the command line (``cli``), the REST API and web console (``http``) and the
MCP server (``mcp_server``). They parse, call one service method and render; behaviour lives below them."""
