package league

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
)

// The policy names a league adds to a scenario's own (and random).
const (
	// PolicyLearner is the league's learner: a tabular learner of package
	// learn, trained by Play on the matches it plays. Settings:
	// {"spec": "egreedy:alpha=0.1,epsilon=0.1"} (learn.Parse). Its values
	// live in the league's directory and are restored by Open.
	PolicyLearner = "learner"
	// PolicySnapshot is a frozen learner: a snapshot file (learn.Snapshot)
	// in the league's directory. Settings: {"file": "snapshots/NAME.json",
	// "greedy": true}; greedy plays the best action it knows
	// (learn.Snapshot.Greedy), otherwise the learner's own selection
	// (exploration included) with its values frozen.
	PolicySnapshot = "snapshot"
	// PolicyLLM is a model behind an OpenAI-compatible endpoint: a
	// checkpoint served as its own model, or a LoRA adapter named as the
	// model. Settings: LLMSettings.
	PolicyLLM = "llm"
	// PolicyExternal is the policy of a rollout request: the model slime
	// trains, which troupe serve --league plays in its role. Play cannot
	// play it.
	PolicyExternal = "external"
)

// Player is one member of a league: a name and a troupe policy with its
// settings.
type Player struct {
	Name   string         `json:"name"`
	Policy runspec.Policy `json:"policy"`
	// Parent names the learner a snapshot was taken from.
	Parent string `json:"parent,omitempty"`
	// Added is how many matches the league had played when the player
	// joined.
	Added int64 `json:"added"`
}

// LLMSettings are the settings of an llm player: where the model is
// served and how it is sampled (protocol.Sampling, inline: each field not
// given keeps the llm package's default, temperature 1, else the
// server's).
type LLMSettings struct {
	BaseURL string `json:"base_url"`
	Kind    string `json:"kind,omitempty"` // vllm (default), sglang, llamacpp, openai
	Model   string `json:"model"`
	protocol.Sampling
	// APIKeyEnv names the environment variable holding the endpoint's key:
	// the key itself is never written into the league.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// Timeout is the wall time of one call, as a Go duration; default the
	// llm package's.
	Timeout string `json:"timeout,omitempty"`
}

// SnapshotSettings are the settings of a snapshot player.
type SnapshotSettings struct {
	File   string `json:"file"`
	Greedy bool   `json:"greedy,omitempty"`
}

// LearnerSettings are the settings of the learner.
type LearnerSettings struct {
	Spec string `json:"spec"`
}

var playerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$`)

// ErrBadPlayer is wrapped by the errors about a player's name, policy or
// settings.
var ErrBadPlayer = errors.New("bad player")

// decodeSettings reads settings strictly into v.
func decodeSettings(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	return nil
}

// compact is raw without insignificant whitespace, so that a player's
// settings are stored in one form.
func compact(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	if b.String() == "{}" || b.String() == "null" {
		return nil, nil
	}
	return b.Bytes(), nil
}

// LLMPlayer is an llm player's policy settings.
func LLMPlayer(s LLMSettings) runspec.Policy {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // strings and numbers always encode
	}
	return runspec.Policy{Name: PolicyLLM, Settings: b}
}

// llmConfig is the client configuration of an llm player.
func llmConfig(s LLMSettings, seed uint64) (llm.Config, error) {
	cfg := llm.DefaultConfig()
	if s.BaseURL == "" {
		return cfg, errors.New("settings: base_url is required")
	}
	if s.Model == "" {
		return cfg, errors.New("settings: model is required")
	}
	cfg.BaseURL, cfg.Model, cfg.Seed = s.BaseURL, s.Model, seed
	cfg.Sampling = s.Sampling.Over(cfg.Sampling)
	if s.Kind != "" {
		cfg.Kind = llm.Kind(s.Kind)
	}
	if s.APIKeyEnv != "" {
		key, ok := os.LookupEnv(s.APIKeyEnv)
		if !ok {
			return cfg, fmt.Errorf("settings: api_key_env: $%s is not set", s.APIKeyEnv)
		}
		cfg.APIKey = key
	}
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("settings: timeout %q: want a positive duration such as 30s", s.Timeout)
		}
		cfg.Timeout = d
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("settings: %w", err)
	}
	return cfg, nil
}

// policies makes and keeps the policies of a league's players: one value
// per player and role, made on first use; the llm clients are closed by
// close.
type policies struct {
	l       *League
	made    map[[2]string]agents.Policy
	clients []*llm.Client
}

func (ps *policies) close() {
	for _, c := range ps.clients {
		c.Close()
	}
	ps.clients, ps.made = nil, nil
}

// policy is player p's policy in role.
func (ps *policies) policy(p *Player, role string) (agents.Policy, error) {
	key := [2]string{p.Name, role}
	if pol, ok := ps.made[key]; ok {
		return pol, nil
	}
	pol, err := ps.make(p, role)
	if err != nil {
		return nil, fmt.Errorf("%w %q (policy %s): %w", ErrBadPlayer, p.Name, p.Policy.Name, err)
	}
	if ps.made == nil {
		ps.made = map[[2]string]agents.Policy{}
	}
	ps.made[key] = pol
	return pol, nil
}

func (ps *policies) make(p *Player, role string) (agents.Policy, error) {
	l := ps.l
	switch p.Policy.Name {
	case PolicyLearner:
		if l.learner == nil {
			return nil, errors.New("the league's learner is not loaded")
		}
		return l.learner, nil
	case PolicySnapshot:
		snap, s, err := l.snapshotOf(p.Policy.Settings)
		if err != nil {
			return nil, err
		}
		if s.Greedy {
			return snap.Greedy(learn.Options{})
		}
		frozen, _, err := snap.Restore(learn.Options{})
		return frozen, err
	case PolicyLLM:
		cfg, err := l.llmConfigOf(p.Policy.Settings)
		if err != nil {
			return nil, err
		}
		client, err := llm.NewClient(cfg)
		if err != nil {
			return nil, err
		}
		pol, err := llm.NewPolicy(client, cfg, llm.ForScenario(l.scenario, l.params)...)
		if err != nil {
			client.Close()
			return nil, err
		}
		ps.clients = append(ps.clients, client)
		return pol, nil
	case PolicyExternal:
		return nil, errors.New("it is the rollout request's policy: only troupe serve --league plays it")
	}
	if len(p.Policy.Settings) > 0 {
		return nil, fmt.Errorf("policy %q takes no settings", p.Policy.Name)
	}
	return l.info.MakePolicy(env.PolicyRequest{Scenario: l.scenario, Params: l.params, Role: role, Name: p.Policy.Name})
}

// checkPlayer vets a new player: its name, its policy and settings, and,
// for those that read files, the files.
func (l *League) checkPlayer(p *Player) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrBadPlayer, p.Name, fmt.Sprintf(format, args...))
	}
	if !playerName.MatchString(p.Name) {
		return bad("a name is 1 to 64 letters, digits and . _ @ + -, starting with a letter or digit")
	}
	if slices.ContainsFunc(l.state.Players, func(q Player) bool { return q.Name == p.Name }) {
		return bad("the league has a player of that name")
	}
	settings, err := compact(p.Policy.Settings)
	if err != nil {
		return bad("%v", err)
	}
	p.Policy.Settings = settings
	switch p.Policy.Name {
	case PolicyLearner, PolicyExternal:
		if l.state.Learner != "" {
			return bad("the league has a learner already, %q", l.state.Learner)
		}
		if p.Policy.Name == PolicyExternal {
			if len(settings) > 0 {
				return bad("policy external takes no settings")
			}
			return nil
		}
		var s LearnerSettings
		if err = decodeSettings(settings, &s); err == nil {
			_, err = learn.Parse(s.Spec)
		}
	case PolicySnapshot:
		_, _, err = l.snapshotOf(settings)
	case PolicyLLM:
		_, err = l.llmConfigOf(settings)
	default:
		if len(settings) > 0 {
			return bad("policy %q takes no settings (only %s do)", p.Policy.Name, strings.Join([]string{PolicyLearner, PolicySnapshot, PolicyLLM}, ", "))
		}
		for _, r := range l.info.Roles {
			if _, err := l.info.MakePolicy(env.PolicyRequest{Scenario: l.scenario, Params: l.params, Role: r.Name, Name: p.Policy.Name}); err != nil {
				return bad("%v", err)
			}
		}
	}
	if err != nil {
		return bad("%v", err)
	}
	return nil
}

// snapshotOf reads a snapshot player's settings and its file.
func (l *League) snapshotOf(raw json.RawMessage) (*learn.Snapshot, SnapshotSettings, error) {
	var s SnapshotSettings
	if err := decodeSettings(raw, &s); err != nil {
		return nil, s, err
	}
	snap, err := l.readSnapshot(s.File)
	return snap, s, err
}

// llmConfigOf reads an llm player's settings.
func (l *League) llmConfigOf(raw json.RawMessage) (llm.Config, error) {
	var s LLMSettings
	if err := decodeSettings(raw, &s); err != nil {
		return llm.Config{}, err
	}
	return llmConfig(s, l.state.Seed)
}

// readSnapshot reads a snapshot file of the league's directory.
func (l *League) readSnapshot(file string) (*learn.Snapshot, error) {
	if file == "" || filepath.IsAbs(file) || !filepath.IsLocal(file) {
		return nil, fmt.Errorf("snapshot file %q: want a path inside the league's directory", file)
	}
	f, err := os.Open(filepath.Join(l.dir, file))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := learn.DecodeSnapshot(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}
