"""`reef serve`: an OpenAI/Anthropic-compatible gateway that relays model calls to an upstream and records each
exchange in the scenario's ledger with a receipt. The only package that imports aiohttp; import it lazily.

Modules: `app` (routes, auth edge, drain), `relay` (upstream URL, headers, credentials), `recording` (exchanges,
durable records, the provenance hooks), `sse` (stream events and in-band receipts), `inject` (--inject system),
`auth` (tokens, bind policy).
"""
