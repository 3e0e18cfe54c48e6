"""The /v1 doors: /v1/chat/completions, /v1/responses, /v1/embeddings and
/v1/messages, one module each; `common` is what the doors beside chat share,
and a request's life on any door (its body rules, headers and trace) is
passthru/lifecycle.py's."""
