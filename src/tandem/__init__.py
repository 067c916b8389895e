"""tandem: retrieval-augmented multi-hop question answering where retriever and LLM cooperate."""

__version__ = "0.1.0"
