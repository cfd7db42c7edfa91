package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/troupe-rl/troupe/agents"
)

// ErrInvalidAnswer is wrapped by every reason an answer is rejected.
var ErrInvalidAnswer = errors.New("invalid answer")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidAnswer, fmt.Sprintf(format, args...))
}

// Answer is the shape of a role's valid answers in the json and tool
// formats: a JSON schema the server constrains the model with, a
// description the prompt gives, and a strict parser. Implementations must
// be safe for concurrent use.
type Answer interface {
	// Schema returns the JSON schema of a valid answer object for obs.
	Schema(obs *agents.Observation) json.RawMessage
	// Describe returns a noun phrase that describes a valid answer object,
	// e.g. `a JSON object {"action": A} where A is one of: a1, b2`.
	Describe(obs *agents.Observation) string
	// Parse reads the model's answer object and returns the action text
	// the scenario reads. A rejected answer returns an error wrapping
	// ErrInvalidAnswer that says what is wrong (the model may be shown
	// it), and the best reading of the action when there is one.
	Parse(obs *agents.Observation, answer string) (action string, err error)
}

// ActionAnswer returns the default Answer: an object with exactly one
// field, "action", a string. When the observation lists legal actions, the
// schema makes it an enum of them and Parse accepts only them, exactly as
// written; otherwise any non-blank string is an action.
func ActionAnswer() Answer { return actionAnswer{} }

type actionAnswer struct{}

// actionObject is the default answer object. ActionAnswer's schema is
// generated from it, so that the schema and the object cannot drift.
type actionObject struct {
	Action string `json:"action"`
}

// actionSchemaParts is ActionAnswer's schema cut where the action's
// constraint goes: an enum of the legal actions, or minLength 1.
type actionSchemaParts struct{ head, tail []byte }

// actionSchema generates the schema of actionObject once per process:
// the schema rides in every model request, so a turn must not pay for
// reflection, only for encoding its legal actions. It panics if the
// generator fails on actionObject, a fixed type (TestActionSchemaBytes covers
// it).
var actionSchema = sync.OnceValue(func() actionSchemaParts {
	s, err := jsonschema.For[actionObject](nil)
	if err != nil {
		panic(fmt.Sprintf("llm: the schema of the action answer: %v", err))
	}
	one := 1
	s.Properties["action"].MinLength = &one
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("llm: the schema of the action answer: %v", err))
	}
	const cut = `"minLength":1`
	head, tail, ok := bytes.Cut(b, []byte(cut))
	if !ok || bytes.Contains(tail, []byte(cut)) {
		panic("llm: the schema of the action answer has no single minLength: " + string(b))
	}
	return actionSchemaParts{head: head, tail: tail}
})

func (actionAnswer) Schema(obs *agents.Observation) json.RawMessage {
	parts := actionSchema()
	var constraint []byte
	if obs.Legal != nil {
		enum, _ := json.Marshal(obs.Legal) // strings always encode
		constraint = append([]byte(`"enum":`), enum...)
	} else {
		constraint = []byte(`"minLength":1`)
	}
	b := make([]byte, 0, len(parts.head)+len(constraint)+len(parts.tail))
	b = append(b, parts.head...)
	b = append(b, constraint...)
	return append(b, parts.tail...)
}

func (actionAnswer) Describe(obs *agents.Observation) string {
	if obs.Legal != nil {
		return `a JSON object {"action": A} where A is one of: ` + listLegal(obs.Legal)
	}
	return `a JSON object {"action": A} where A is your action`
}

func (actionAnswer) Parse(obs *agents.Observation, answer string) (string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(answer), &obj); err != nil {
		return "", invalid("the answer is not a JSON object: %v", err)
	}
	if obj == nil {
		return "", invalid("the answer is null, not a JSON object")
	}
	raw, ok := obj["action"]
	if !ok {
		return "", invalid(`the object has no "action" field (it has: %s)`, strings.Join(slices.Sorted(maps.Keys(obj)), ", "))
	}
	if len(obj) != 1 {
		others := slices.DeleteFunc(slices.Sorted(maps.Keys(obj)), func(k string) bool { return k == "action" })
		return "", invalid(`the object has fields besides "action": %s`, strings.Join(others, ", "))
	}
	var action string
	if err := json.Unmarshal(raw, &action); err != nil {
		return "", invalid(`"action" is %s, not a string`, raw)
	}
	return action, checkAction(obs, action)
}

// checkAction accepts a legal action, or any non-blank one when the action
// space is free.
func checkAction(obs *agents.Observation, action string) error {
	if obs.Legal == nil {
		if strings.TrimSpace(action) == "" {
			return invalid("the action is blank")
		}
		return nil
	}
	if !slices.Contains(obs.Legal, action) {
		return invalid("%q is not a legal action; legal: %s", action, listLegal(obs.Legal))
	}
	return nil
}

// maxListed bounds the legal actions a prompt or an error message lists.
const maxListed = 64

func listLegal(legal []string) string {
	if len(legal) > maxListed {
		return strings.Join(legal[:maxListed], ", ") + fmt.Sprintf(", ... (%d in all)", len(legal))
	}
	return strings.Join(legal, ", ")
}

// ObjectAnswer returns an Answer for structured actions (an offer, a vote
// with reasons): any JSON object that check accepts, under the given
// schema and description. The action text is the object itself, compacted,
// for the scenario to decode. check may be nil.
func ObjectAnswer(schema json.RawMessage, describe string, check func(obs *agents.Observation, obj map[string]json.RawMessage) error) Answer {
	return objectAnswer{schema: schema, describe: describe, check: check}
}

type objectAnswer struct {
	schema   json.RawMessage
	describe string
	check    func(*agents.Observation, map[string]json.RawMessage) error
}

func (a objectAnswer) Schema(*agents.Observation) json.RawMessage { return a.schema }
func (a objectAnswer) Describe(*agents.Observation) string        { return a.describe }

func (a objectAnswer) Parse(obs *agents.Observation, answer string) (string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(answer), &obj); err != nil || obj == nil {
		return "", invalid("the answer is not a JSON object")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(answer)); err != nil {
		return "", invalid("the answer is not a JSON object: %v", err)
	}
	if a.check != nil {
		if err := a.check(obs, obj); err != nil {
			if !errors.Is(err, ErrInvalidAnswer) {
				err = fmt.Errorf("%w: %w", ErrInvalidAnswer, err)
			}
			return b.String(), err
		}
	}
	return b.String(), nil
}
