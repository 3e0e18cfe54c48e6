"""The /v1 doors beside chat completions: /v1/responses, /v1/embeddings and
/v1/messages, one module each; `common` is what they share."""
