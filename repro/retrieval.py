"""banking_knowledge's retrieval configs (τ²'s `--retrieval-config`): what each needs beyond τ²
itself, and whether its model calls can reach Marina.

Read from sierra-research/tau2-bench a2c0247 (`domains/banking_knowledge/retrieval.py`):

- `bm25*` and `grep_only` search in process (rank-bm25, a regex): nothing more, no model call
  (`bm25_reranker*` adds the LLM reranker below). `no_knowledge`, `full_kb` and `golden_retrieval`
  give no search tool at all.
- `openai_embeddings*` embed the knowledge base and each query with `text-embedding-3-large`
  through the OpenAI client, which reads `OPENAI_BASE_URL` and `OPENAI_API_KEY`: pointed at Marina
  under the experiment's key, those calls are metered like the agent's.
- `*_reranker*` rerank with an LLM (`gpt-5.2`, `beta.chat.completions.parse`, a `json_schema`
  response format), through the same client.
- `alltools*` and `terminal_use*` give the agent a shell over the documents, which needs
  Anthropic's sandbox-runtime (`srt`); `alltools` also embeds with `text-embedding-3-large`.
- `qwen_embeddings*` (and `alltools-qwen`) call OpenRouter at a URL written into τ²
  (`https://openrouter.ai/api/v1`): Marina never sees them, so their cost is not metered.
"""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT = "alltools"  # τ²'s own default for banking_knowledge
DOMAINS = ("banking_knowledge",)  # the domains that take --retrieval-config
NOTHING_MORE = ("bm25", "bm25_grep", "grep_only")  # run with τ² alone: no model call, no sandbox
EMBEDDING_MODEL = "text-embedding-3-large"
RERANKER_MODEL = "gpt-5.2"


@dataclass(frozen=True)
class Needs:
    config: str
    models: tuple[str, ...]  # model ids τ² itself calls through the OpenAI client (metered via Marina)
    sandbox: bool  # the shell tool: Anthropic's sandbox-runtime
    unmetered: bool  # calls a hard-coded provider URL: Marina cannot see or meter them

    def sentence(self) -> str:
        """What the config needs, for `doctor` and the plan."""
        parts = []
        if self.unmetered:
            parts.append(
                "embeds through OpenRouter at a URL written into τ² (not OPENAI_BASE_URL): its calls cannot be "
                "routed through Marina, so their cost is not metered or budgeted"
            )
        if self.models:
            parts.append(
                f"τ² calls {' and '.join(self.models)} itself through the OpenAI client: the kit points "
                "OPENAI_BASE_URL at Marina under the experiment's key, so Marina must serve "
                + ("them" if len(self.models) > 1 else "it")
            )
        if self.sandbox:
            parts.append("its shell tool needs Anthropic's sandbox-runtime (`srt` on PATH)")
        if not parts:
            parts.append("nothing beyond τ² (searched in process, no model call)")
        return f"--retrieval-config {self.config}: " + "; ".join(parts)


def needs(config: str) -> Needs:
    models: list[str] = []
    unmetered = "qwen" in config
    if ("openai_embeddings" in config or config == "alltools") and not unmetered:
        models.append(EMBEDDING_MODEL)
    if "reranker" in config:
        models.append(RERANKER_MODEL)
    sandbox = config.startswith(("alltools", "terminal_use"))
    return Needs(config, tuple(models), sandbox, unmetered)


def applies(domain: str) -> bool:
    return domain in DOMAINS
