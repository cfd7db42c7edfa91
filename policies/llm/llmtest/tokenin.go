package llmtest

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The token-in endpoints of vLLM and SGLang, written from their source,
// field by field (the lists below; testdata/fields/*.txt keeps each as
// extracted by hand from the source file and commit it names, and
// TestTokenInFieldsMatchTheSource checks them against each other). The
// fake refuses a request field outside its endpoint's list with 400:
// SGLang's sampling_params does so too (SamplingParams takes no other
// keyword); the other endpoints of the real servers log or ignore an
// unknown field, and the fake is stricter so that a misspelt field fails
// a test instead of being ignored.

// VLLMCompletionFields are the fields of vLLM's CompletionRequest
// (vllm/entrypoints/openai/completion/protocol.py).
var VLLMCompletionFields = []string{
	"model", "prompt", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n", "presence_penalty",
	"seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user", "use_beam_search", "top_k",
	"min_p", "repetition_penalty", "watermarking", "length_penalty", "stop_token_ids", "include_stop_str_in_output",
	"ignore_eos", "min_tokens", "skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens",
	"truncation_side", "allowed_token_ids", "prompt_logprobs", "logprob_token_ids", "bad_words", "prompt_embeds",
	"add_special_tokens", "response_format", "structured_outputs", "priority", "request_id", "session_id",
	"return_tokens_as_token_ids", "return_token_ids", "routed_experts_prompt_start", "return_token_offsets",
	"return_mm_kwargs", "cache_salt", "kv_transfer_params", "ec_transfer_params", "vllm_xargs", "repetition_detection",
	"thinking_token_budget", "stream_interval",
}

// VLLMCompletionChoiceFields are the fields of vLLM's
// CompletionResponseChoice, which the fake writes (routed_experts and
// prompt_logprobs only when asked for, so never).
var VLLMCompletionChoiceFields = []string{
	"index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids", "prompt_logprobs", "prompt_token_ids", "routed_experts",
}

// VLLMTokenizeChatFields are the fields of vLLM's TokenizeChatRequest;
// VLLMTokenizeCompletionFields those of its TokenizeCompletionRequest;
// VLLMDetokenizeFields those of its DetokenizeRequest
// (vllm/entrypoints/serve/tokenize/protocol.py).
var (
	VLLMTokenizeChatFields = []string{
		"model", "messages", "add_generation_prompt", "return_token_strs", "continue_final_message", "add_special_tokens",
		"chat_template", "chat_template_kwargs", "media_io_kwargs", "mm_processor_kwargs", "tools",
	}
	VLLMTokenizeCompletionFields = []string{"model", "prompt", "add_special_tokens", "return_token_strs"}
	VLLMDetokenizeFields         = []string{"model", "tokens"}
)

// SGLangTokenizeFields and SGLangDetokenizeFields are the fields SGLang's
// /v1/tokenize and /v1/detokenize read
// (python/sglang/srt/entrypoints/openai/serving_tokenize.py).
var (
	SGLangTokenizeFields   = []string{"model", "prompt", "add_special_tokens"}
	SGLangDetokenizeFields = []string{"model", "tokens", "skip_special_tokens"}
)

// SGLangSamplingFields are the API fields of SGLang's SamplingParams
// (python/sglang/srt/sampling/sampling_params.py).
var SGLangSamplingFields = []string{
	"max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
	"frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema", "regex",
	"ebnf", "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
	"custom_params", "stream_interval", "logit_bias", "sampling_seed",
}

// SGLangGenerateFields are the fields of SGLang's GenerateReqInput
// (python/sglang/srt/managers/io_struct.py) that a text request may send:
// the rest are for images, audio, video, disaggregation and internals.
var SGLangGenerateFields = []string{
	"rid", "session_id", "text", "input_ids", "sampling_params", "return_logprob", "logprob_start_len",
	"top_logprobs_num", "token_ids_logprob", "return_text_in_logprobs", "stream", "log_metrics",
	"return_hidden_states", "return_routed_experts", "lora_path", "custom_logit_processor", "routed_dp_rank",
	"routing_key", "conversation_id", "priority", "extra_key", "no_logs", "custom_labels", "return_entropy",
	"return_prompt_token_ids", "require_reasoning", "max_thinking_tokens", "session_params", "cache_salt",
}

// SGLangMetaInfoFields are the meta_info keys of a /generate answer the
// fake writes (python/sglang/srt/managers/tokenizer_manager.py).
var SGLangMetaInfoFields = []string{"id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "output_token_logprobs"}

// strictFields decodes body as a JSON object whose keys are all in known.
func strictFields(body []byte, known []string, what string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, badRequest("%s: the body is not a JSON object", what)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(known, k) {
			return nil, badRequest("%s: unknown field %q", what, k)
		}
	}
	return m, nil
}

// decodeField decodes m[name] into v when it is present and not null,
// and reports whether it was.
func decodeField(m map[string]json.RawMessage, name string, v any) (bool, error) {
	raw, ok := m[name]
	if !ok || string(raw) == "null" {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, badRequest("field %s: %v", name, err)
	}
	return true, nil
}

// readStrict reads a request body of known fields, or answers 400.
func (s *Server) readStrict(w http.ResponseWriter, r *http.Request, known []string, what string) (map[string]json.RawMessage, []byte, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, nil, false
	}
	m, err := strictFields(body, known, what)
	if err != nil {
		s.fail(w, err)
		return nil, nil, false
	}
	return m, body, true
}

// fail answers 400 with err.
func (s *Server) fail(w http.ResponseWriter, err error) {
	s.count(func(st *Stats) { st.BadRequests++ })
	writeError(w, http.StatusBadRequest, err.Error())
}

// vllmTokenize answers vLLM's POST /tokenize: a chat (messages) or a
// prompt, to {count, max_model_len, tokens}.
func (s *Server) vllmTokenize(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.Tokenize++ })
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var probe map[string]json.RawMessage
	_ = json.Unmarshal(body, &probe)
	var ids []int
	if _, chat := probe["messages"]; chat {
		m, err := strictFields(body, VLLMTokenizeChatFields, "tokenize (chat)")
		if err != nil {
			s.fail(w, err)
			return
		}
		var msgs []Message
		addGen := true
		if _, err := decodeField(m, "messages", &msgs); err != nil || len(msgs) == 0 {
			s.fail(w, badRequest("tokenize (chat): messages must be a non-empty list"))
			return
		}
		if _, err := decodeField(m, "add_generation_prompt", &addGen); err != nil {
			s.fail(w, err)
			return
		}
		text := ApplyTemplate(msgs)
		if !addGen {
			text = strings.TrimSuffix(text, specials[ImStart]+"assistant\n")
		}
		ids = Tokenize(text)
	} else {
		m, err := strictFields(body, VLLMTokenizeCompletionFields, "tokenize (prompt)")
		if err != nil {
			s.fail(w, err)
			return
		}
		var prompt string
		if ok, err := decodeField(m, "prompt", &prompt); err != nil || !ok {
			s.fail(w, badRequest("tokenize (prompt): prompt must be a string"))
			return
		}
		ids = Tokenize(prompt)
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(ids), "max_model_len": ContextLength, "tokens": ids})
}

// ContextLength is the fake model's context, as the tokenize answers
// report it (max_model_len).
const ContextLength = 32768

// vllmDetokenize answers vLLM's POST /detokenize: {prompt}, every token's
// text, special tokens included.
func (s *Server) vllmDetokenize(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.Detokenize++ })
	m, _, ok := s.readStrict(w, r, VLLMDetokenizeFields, "detokenize")
	if !ok {
		return
	}
	var ids []int
	if ok, err := decodeField(m, "tokens", &ids); err != nil || !ok {
		s.fail(w, badRequest("detokenize: tokens must be a list of ids"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": Detokenize(ids)})
}

// sglangTokenize answers SGLang's POST /v1/tokenize: {tokens, count,
// max_model_len}. The fake tokenizer adds no special tokens, so
// add_special_tokens changes nothing.
func (s *Server) sglangTokenize(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.Tokenize++ })
	m, _, ok := s.readStrict(w, r, SGLangTokenizeFields, "tokenize")
	if !ok {
		return
	}
	var prompt string
	if ok, err := decodeField(m, "prompt", &prompt); err != nil || !ok {
		s.fail(w, badRequest("tokenize: prompt must be a string (the fake takes no list)"))
		return
	}
	ids := Tokenize(prompt)
	writeJSON(w, http.StatusOK, map[string]any{"tokens": ids, "count": len(ids), "max_model_len": ContextLength})
}

// sglangDetokenize answers SGLang's POST /v1/detokenize: {text}, special
// tokens left out unless skip_special_tokens is false (its default is
// true, as the tokenizer's decode).
func (s *Server) sglangDetokenize(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.Detokenize++ })
	m, _, ok := s.readStrict(w, r, SGLangDetokenizeFields, "detokenize")
	if !ok {
		return
	}
	var ids []int
	skip := true
	if ok, err := decodeField(m, "tokens", &ids); err != nil || !ok {
		s.fail(w, badRequest("detokenize: tokens must be a list of ids"))
		return
	}
	if _, err := decodeField(m, "skip_special_tokens", &skip); err != nil {
		s.fail(w, err)
		return
	}
	if skip {
		ids = slices.DeleteFunc(slices.Clone(ids), func(id int) bool { return id < FirstByte })
	}
	writeJSON(w, http.StatusOK, map[string]string{"text": Detokenize(ids)})
}

// generated is one answer of the fake model to a token prompt: the
// sampled ids (ending with ImEnd when it stopped by itself) and whether
// it stopped by itself.
type generated struct {
	ids     []int
	stopped bool
}

// generate runs the brain on the chat a token prompt stands for, within
// max tokens (< 0: no bound).
func (s *Server) generate(req *Request, reply Reply, max int) generated {
	comp := Tokenize(reply.Text)
	if reply.Bytewise {
		comp = comp[:0]
		for i := range len(reply.Text) {
			comp = append(comp, Bytes(reply.Text[i:i+1]))
		}
	}
	g := generated{stopped: reply.Finish == ""}
	if g.stopped {
		comp = append(comp, ImEnd)
	}
	if max >= 0 && len(comp) > max {
		comp, g.stopped = comp[:max], false
	}
	g.ids = comp
	return g
}

// vllmCompletions answers vLLM's POST /v1/completions with a prompt of
// token ids (or text): CompletionResponse with, under return_token_ids,
// token_ids and prompt_token_ids, and under logprobs, the sampled
// tokens' log-probs ("token_id:N" tokens under
// return_tokens_as_token_ids). max_tokens defaults to 16, as vLLM's;
// null means the context's room.
func (s *Server) vllmCompletions(w http.ResponseWriter, r *http.Request, body []byte) (bool, error) {
	req, prompt, logprobs, err := vllmCompletionRequest(body)
	if err != nil {
		return false, err
	}
	reply, fault, ok := s.think(w, r, req, req.Model)
	if !ok {
		return false, nil
	}
	g := s.generate(req, reply, req.MaxTokens)
	text := g.ids
	if g.stopped {
		text = g.ids[:len(g.ids)-1] // skip_special_tokens: the end token's text is not written
	}
	ch := map[string]any{"index": 0, "text": Detokenize(text), "logprobs": nil, "finish_reason": "length", "stop_reason": nil}
	if g.stopped {
		ch["finish_reason"] = "stop"
	}
	ids := fault.Kind != NoTokenIDs
	if ids && req.Flag("return_token_ids") {
		ch["token_ids"], ch["prompt_token_ids"] = g.ids, prompt
	}
	if logprobs != nil {
		ch["logprobs"] = vllmLogprobs(g.ids, ids && req.Flag("return_tokens_as_token_ids"), *logprobs != 0)
	}
	out := map[string]any{
		"id": "cmpl-troupe", "object": "text_completion", "created": created, "model": req.Model, "choices": []any{ch},
		"usage": usage{PromptTokens: len(prompt), CompletionTokens: len(g.ids), TotalTokens: len(prompt) + len(g.ids)},
	}
	writeJSON(w, http.StatusOK, out)
	return true, nil
}

// vllmCompletionRequest reads the body of a POST /v1/completions as vLLM
// does, refusing what vLLM refuses with its message: the request, whose
// MaxTokens is -1 for max_tokens null, the prompt's token ids, and the
// logprobs asked for (nil: none).
func vllmCompletionRequest(body []byte) (req *Request, prompt []int, logprobs *int, err error) {
	m, err := strictFields(body, VLLMCompletionFields, "completions")
	if err == nil {
		var text string
		if _, e := decodeField(m, "prompt", &prompt); e != nil {
			if _, e2 := decodeField(m, "prompt", &text); e2 != nil || text == "" {
				err = badRequest("completions: prompt must be a list of token ids or a string")
			}
			prompt = Tokenize(text)
		}
		if err == nil && len(prompt) == 0 {
			err = badRequest("Either prompt or prompt_embeds must be provided and non-empty.")
		}
	}
	req = &Request{Body: body}
	max := 16
	var format struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	for _, f := range []func() error{
		func() error { _, e := decodeField(m, "model", &req.Model); return e },
		func() error { _, e := decodeField(m, "seed", &req.Seed); return e },
		func() error { _, e := decodeField(m, "temperature", &req.Temperature); return e },
		func() error { _, e := decodeField(m, "logprobs", &logprobs); return e },
		func() error {
			if raw, ok := m["max_tokens"]; ok && string(raw) == "null" {
				max = -1
				return nil
			}
			_, e := decodeField(m, "max_tokens", &max)
			return e
		},
		func() error {
			ok, e := decodeField(m, "response_format", &format)
			if ok && format.Type == "json_schema" {
				if format.JSONSchema == nil || len(format.JSONSchema.Schema) == 0 {
					return badRequest("response_format json_schema without a schema")
				}
				req.Schema = format.JSONSchema.Schema
			}
			return e
		},
	} {
		if err == nil {
			err = f()
		}
	}
	if err == nil && logprobs != nil && *logprobs < 0 && *logprobs != -1 {
		err = badRequest("`logprobs` must be a positive value or -1.")
	}
	if err != nil {
		return nil, nil, nil, err
	}
	req.Messages, req.MaxTokens, req.Logprobs = ReadTemplate(Detokenize(prompt)), max, logprobs != nil
	return req, prompt, logprobs, nil
}

// vllmLogprobs is a completion's "logprobs" for the sampled tokens ids:
// each token's text ("token_id:N" when asIDs), offset and log-prob, and,
// when top, a top list holding the token alone.
func vllmLogprobs(ids []int, asIDs, top bool) any {
	type lp struct {
		TextOffset    []int                `json:"text_offset"`
		TokenLogprobs []float64            `json:"token_logprobs"`
		Tokens        []string             `json:"tokens"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	}
	l := lp{TextOffset: []int{}, TokenLogprobs: []float64{}, Tokens: []string{}, TopLogprobs: []map[string]float64{}}
	off := 0
	for i, id := range ids {
		tok := Piece(id)
		if asIDs {
			tok = "token_id:" + strconv.Itoa(id)
		}
		l.TextOffset = append(l.TextOffset, off)
		off += len(Piece(id))
		l.Tokens = append(l.Tokens, tok)
		l.TokenLogprobs = append(l.TokenLogprobs, LogProb(id, i))
		t := map[string]float64{}
		if top {
			t[tok] = LogProb(id, i)
		}
		l.TopLogprobs = append(l.TopLogprobs, t)
	}
	return l
}

// sglangGenerate answers SGLang's native POST /generate with input_ids
// (or text): {"text", "output_ids", "meta_info"}, with
// meta_info.output_token_logprobs, [log-prob, id, null] per sampled
// token, under return_logprob. sampling_params' max_new_tokens defaults
// to 128, as SGLang's; null means the context's room. json_schema must be
// a string.
func (s *Server) sglangGenerate(w http.ResponseWriter, r *http.Request, body []byte) (bool, error) {
	m, err := strictFields(body, SGLangGenerateFields, "generate")
	var prompt []int
	var sp map[string]json.RawMessage
	if err == nil {
		var text string
		hasIDs, e1 := decodeField(m, "input_ids", &prompt)
		hasText, e2 := decodeField(m, "text", &text)
		switch {
		case e1 != nil || e2 != nil:
			err = badRequest("generate: input_ids must be a list of ids, text a string")
		case hasIDs == hasText:
			err = badRequest("Either text, input_ids or input_embeds should be provided.")
		case hasText:
			prompt = Tokenize(text)
		}
	}
	if err == nil {
		if raw, ok := m["sampling_params"]; ok {
			sp, err = strictFields(raw, SGLangSamplingFields, "sampling_params (SamplingParams got an unexpected keyword argument)")
		}
	}
	req := &Request{Body: body}
	max := 128
	var schema *string
	if err == nil {
		if raw, ok := sp["max_new_tokens"]; ok && string(raw) == "null" {
			max = -1
		} else if _, e := decodeField(sp, "max_new_tokens", &max); e != nil {
			err = e
		}
	}
	for _, f := range []func() error{
		func() error { _, e := decodeField(sp, "sampling_seed", &req.Seed); return e },
		func() error { _, e := decodeField(sp, "temperature", &req.Temperature); return e },
		func() error { _, e := decodeField(sp, "json_schema", &schema); return e },
		func() error { _, e := decodeField(m, "return_logprob", &req.Logprobs); return e },
	} {
		if err == nil {
			err = f()
		}
	}
	if err == nil && max < -1 {
		err = badRequest("max_new_tokens must be at least 0, got %d.", max)
	}
	if err != nil {
		return false, err
	}
	if schema != nil {
		req.Schema = json.RawMessage(*schema)
	}
	req.Messages, req.MaxTokens = ReadTemplate(Detokenize(prompt)), max
	reply, fault, ok := s.think(w, r, req, "")
	if !ok {
		return false, nil
	}
	g := s.generate(req, reply, max)
	text := g.ids
	finish := map[string]any{"type": "length", "length": len(g.ids)}
	if g.stopped {
		text = g.ids[:len(g.ids)-1]
		finish = map[string]any{"type": "stop", "matched": ImEnd}
	}
	meta := map[string]any{
		"id": "troupe-generate", "finish_reason": finish, "prompt_tokens": len(prompt),
		"completion_tokens": len(g.ids), "cached_tokens": 0,
	}
	if req.Logprobs && fault.Kind != NoTokenIDs {
		lps := make([][]any, len(g.ids))
		for i, id := range g.ids {
			lps[i] = []any{LogProb(id, i), id, nil}
		}
		meta["output_token_logprobs"] = lps
	}
	writeJSON(w, http.StatusOK, map[string]any{"text": Detokenize(text), "output_ids": g.ids, "meta_info": meta})
	return true, nil
}
