package llm

import (
	"encoding/json"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
)

// ForScenario returns the options that fit a policy to a scenario: system
// prompts that describe it (WithScenario) and, when the scenario's answers
// are structured (env.StructuredActions), each role's JSON schema and rule
// check as its Answer, so that an answer the rules reject is asked again.
func ForScenario(sc env.Scenario, p env.Params) []Option {
	info := sc.Info()
	opts := []Option{WithScenario(info)}
	structured, ok := sc.(env.StructuredActions)
	if !ok {
		return opts
	}
	for _, r := range info.Roles {
		check := func(obs *agents.Observation, obj map[string]json.RawMessage) error {
			text, err := json.Marshal(obj)
			if err != nil {
				return err
			}
			return structured.CheckAnswer(obs, string(text)) // ObjectAnswer marks it invalid
		}
		schema := json.RawMessage(structured.ActionSchema(p, r.Name))
		opts = append(opts, WithAnswer(r.Name, ObjectAnswer(schema, "one JSON object, as the rules above describe", check)))
	}
	return opts
}
