"""The REST API over one ``KnowledgeBase``: ``app.create_app`` wires the routers (one module per group:
``operations``, ``documents``, ``retrieval``, ``sessions``, ``console``, ``docs``), the dependencies that hand
them the caller's key and the knowledge base (``deps``), the guards every request passes (keys, origins, hosts,
body size: ``guard``, ``request_guard``), the error mapping (``errors``) and ``/mcp``."""
