// Package scripted is an OpenAI-compatible chat completions server that answers from a
// rules file instead of a model. NOVA's tests and its offline demo point the ordinary
// OpenAI client (go-openai, BaseURL = URL()+"/v1") at it, so the code under test is the
// code that talks to OpenAI in production.
//
// Endpoints (with or without the /v1 prefix):
//
//	POST /v1/chat/completions   request and response shaped as OpenAI's, including tool calls
//	                            and usage; stream=true is rejected with 400
//	POST /v1/embeddings         OpenAI's request (input a string or strings; encoding_format
//	                            float or base64; dimensions) and response, with usage; the
//	                            vectors are Embed's, not a model's (no rules involved)
//	GET  /v1/models             the models named in the rules
//	GET  /v1/models/{id}
//	GET  /_nova/requests        every recorded request as JSON; DELETE does what Reset does
//	GET  /_nova/health
//
// Every answer is labelled: system_fingerprint "nova-scripted" and the header
// X-Nova-Scripted: true. The content itself is never altered, so scripted code stays runnable.
//
// # Rules file
//
// YAML or JSON. Either a list of rules, or an object:
//
//	rules:                   # ordered; the first rule that matches (and is not used up) answers
//	  - name: retry-1        # optional; shown in recordings and errors
//	    match:               # every field optional; all given fields must hold
//	      model: gpt-4o*     # exact or glob (* and ?) on the requested model
//	      agent: code-generator   # header X-Nova-Agent, else "NOVA agent: <name>" in the system prompt; glob
//	      system_contains: [a, b] # substrings of the system (and developer) messages; a list means all
//	      user_contains: discount # substrings of the last user message
//	      contains: NameError     # substrings of any message (tool call arguments included)
//	      regex: 'total\W+1500'   # RE2 on all messages joined by newlines; a list means all
//	      has_tool_result: true   # the conversation holds a role "tool" message (false: holds none)
//	    respond:             # one answer ...
//	      content: "literal text, never templated"
//	    responses:           # ... or a sequence: the n-th match gets the n-th answer, the last repeats
//	      - content: "..."
//	      - template: "Hello {{.LastUser}}"   # text/template; data is TemplateData, func json
//	      - tool_calls:
//	          - name: search_documentation
//	            arguments: {library: pandas, query: read_csv}   # object, or a string sent as is
//	        content: optional text sent alongside the calls
//	      - status: 429      # answer an HTTP error in OpenAI's error shape
//	        error: {message: "Rate limit reached", type: requests, code: rate_limit_exceeded}
//	        headers: {Retry-After: "1"}
//	      - content: "{}"
//	        usage: {prompt_tokens: 120, completion_tokens: 30, cached_tokens: 64, reasoning_tokens: 0}
//	        finish_reason: stop  # default: tool_calls when there are tool calls, else stop
//	        delay: 250ms
//	    times: 3             # optional; after 3 answers the rule stops matching
//	models: [gpt-4o-mini]    # extra ids for /v1/models besides the exact models in the rules
//	embeddings:              # optional: /v1/embeddings
//	  dimensions: 512        # vector length unless a request asks for one (default 512)
//	  disabled: true         # answer 404, as a server without embeddings
//	fallback:                # answer when no rule matches; default: 500 "no scripted rule matches"
//	  status: 500
//
// Token counts are estimated deterministically unless a rule gives them: a text costs
// ceil(runes/4) tokens, each message 3 more, the tools' JSON schema counts as text.
//
// # Embeddings
//
// A scripted embedding (Embed) is a hashed bag of words and character trigrams, normalized:
// texts that share most of their words are near (a rewording like "Calculate discount (10%
// if total > 1000)" and "Calculate the discount (10% when total > 1000)" has a cosine
// similarity of about 0.99), texts about other things are far (below 0.5). It is
// deterministic, so tests of similarity-based features can assert exact outcomes. The
// answer carries the X-Nova-Scripted header and, beyond OpenAI's fields, system_fingerprint
// "nova-scripted".
//
// A rule's answer must be one a real model could give to that request, otherwise the server
// answers 500 naming the rule: content for a json_object/json_schema response_format must be
// JSON, tool calls must name offered tools and respect tool_choice. Requests OpenAI would
// reject (no model, no messages, a tool message answering no tool call, json_object without
// the word "json" in the messages, ...) get OpenAI's 400, so a client bug fails here as it
// would against OpenAI.
package scripted
