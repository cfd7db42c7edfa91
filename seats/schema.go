package seats

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// actionArgs is act's arguments when the scenario has no structured
// moves: the action's text (moveText reads it).
type actionArgs struct {
	Action string `json:"action" jsonschema:"your action: one of the legal actions the observation lists"`
}

// observeArgs is observe's arguments: none.
type observeArgs struct{}

// toolSchemas are the input schemas of the tools whose arguments are the
// Go types above. They are generated from the types, so that a schema
// and its type cannot drift.
type toolSchemas struct {
	observe, action json.RawMessage
}

// argSchemas generates toolSchemas once per process; every seat shares
// them, read-only. It panics if the generator fails on the types above,
// which are fixed (TestToolSchemas covers them).
var argSchemas = sync.OnceValue(func() toolSchemas {
	observe, err := jsonschema.For[observeArgs](nil)
	if err != nil {
		panic(fmt.Sprintf("seats: observe's schema: %v", err))
	}
	// An empty "properties" all the same: OpenAI's function tools want
	// an object schema to name its properties.
	observe.Properties = map[string]*jsonschema.Schema{}
	action, err := jsonschema.For[actionArgs](nil)
	if err != nil {
		panic(fmt.Sprintf("seats: act's schema: %v", err))
	}
	return toolSchemas{observe: mustMarshal(observe), action: mustMarshal(action)}
})

func mustMarshal(s *jsonschema.Schema) json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("seats: encoding a tool's schema: %v", err))
	}
	return b
}
