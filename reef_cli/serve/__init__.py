"""`reef serve`: an OpenAI/Anthropic-compatible gateway that relays model calls to an upstream and records each
exchange in the scenario's ledger with a receipt. The only package that imports httptools and uvloop; import it
lazily.

Modules: `app` (routes, auth edge, the model routes, drain), `streams` (a recorded stream's relay and its ends),
`reef_routes` (report, releases, status, healthz), `http_server` (the HTTP/1.1 server: one protocol per connection,
llhttp's parser, keep-alive, limits), `answers` (whole and streamed answers: when their bytes leave), `upstream_http`
(the upstream HTTP/1.1 client on the same parser: pooled connections, TLS, timeouts), `relay` (upstream URL, headers,
credentials), `recording` (exchanges, durable records, the provenance hooks), `sse` (stream events and in-band
receipts), `inject` (--inject system), `auth` (tokens, bind policy).
"""
