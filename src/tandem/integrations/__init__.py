"""tandem where users already work: retrievers and method runnables for LangChain
(:mod:`tandem.integrations.langchain`, extra ``langchain``) and LlamaIndex
(:mod:`tandem.integrations.llamaindex`, extra ``llamaindex``), over an index folder or a running
``tandem serve``; the shared sources in :mod:`tandem.integrations.base`. The MCP server is
:mod:`tandem.server.mcp` (``tandem mcp``, extra ``mcp``)."""

from tandem.integrations.base import (
    Answerer,
    PassageSearch,
    ServerError,
    open_answerer,
    open_search,
)
from tandem.server.payloads import evidence

__all__ = ["Answerer", "PassageSearch", "ServerError", "evidence", "open_answerer", "open_search"]
