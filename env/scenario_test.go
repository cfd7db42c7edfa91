package env_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
)

func TestParseParams(t *testing.T) {
	info := &env.Info{Name: "demo", Schedule: env.Sequential, Roles: []*agents.Role{relayRole}, Params: []env.ParamSpec{
		env.Int("n", 3, 1, 10, "count"),
		env.Float("c", 0.5, 0, 1, "rate"),
		env.String("mode", "a", "mode", "a", "b"),
		env.Bool("loud", false, "noise"),
	}}
	require.NoError(t, info.Validate())
	p, err := info.ParseParams(nil)
	require.NoError(t, err)
	assert.Equal(t, 3, p.Int("n"))
	assert.Equal(t, 0.5, p.Float("c"))
	assert.Equal(t, "a", p.String("mode"))
	assert.False(t, p.Bool("loud"))
	assert.Equal(t, map[string]string{"n": "3", "c": "0.5", "mode": "a", "loud": "false"}, p.Map())

	p, err = info.ParseParams(map[string]string{"n": "10", "c": "1", "mode": "b", "loud": "true"})
	require.NoError(t, err)
	assert.Equal(t, 10, p.Int("n"))
	assert.True(t, p.Bool("loud"))

	for given, msg := range map[string]string{
		"nn=1":      `scenario demo has no parameter "nn" (it takes n, c, mode, loud)`,
		"n=0":       "demo n: 0 is outside [1, 10]",
		"n=x":       `demo n: "x" is not an integer`,
		"c=NaN":     `demo c: "NaN" is not a finite number`,
		"mode=z":    `demo mode: "z" is not one of a, b`,
		"loud=very": `demo loud: "very" is not true or false`,
	} {
		kv, err := env.ParseAssignments([]string{given})
		require.NoError(t, err)
		_, err = info.ParseParams(kv)
		assert.ErrorIs(t, err, env.ErrBadParam, given)
		assert.ErrorContains(t, err, msg, given)
	}
	assert.Panics(t, func() { p.Int("undeclared") }, "asking for an undeclared parameter is a scenario bug")
}

func TestParseAssignments(t *testing.T) {
	kv, err := env.ParseAssignments([]string{"a=1", "b = x=y", "c="})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "1", "b": " x=y", "c": ""}, kv)
	_, err = env.ParseAssignments([]string{"novalue"})
	assert.ErrorContains(t, err, `"novalue" is not key=value`)
	_, err = env.ParseAssignments([]string{"a=1", "a=2"})
	assert.ErrorContains(t, err, `"a" given twice`)
}

func TestInfoValidate(t *testing.T) {
	ok := func() *env.Info {
		return &env.Info{Name: "ok", Schedule: env.Async, Roles: []*agents.Role{relayRole}}
	}
	require.NoError(t, ok().Validate())
	for msg, mod := range map[string]func(*env.Info){
		"a scenario has no name":           func(i *env.Info) { i.Name = "" },
		"must not contain spaces":          func(i *env.Info) { i.Name = "a b" },
		"is not Sequential":                func(i *env.Info) { i.Schedule = 0 },
		"no roles":                         func(i *env.Info) { i.Roles = nil },
		`two roles are called "p"`:         func(i *env.Info) { i.Roles = append(i.Roles, relayRole) },
		"no initial state":                 func(i *env.Info) { i.Roles = []*agents.Role{{Name: "r"}} },
		`two parameters are called "x"`:    func(i *env.Info) { i.Params = []env.ParamSpec{env.Int("x", 1, 0, 2, ""), env.Int("x", 1, 0, 2, "")} },
		`default of parameter "x"`:         func(i *env.Info) { i.Params = []env.ParamSpec{env.Int("x", 5, 0, 2, "")} },
		`default policy "smart"`:           func(i *env.Info) { i.DefaultPolicy = "smart" },
		`null action for unknown role "q"`: func(i *env.Info) { i.Counterfactual = &env.CounterfactualSpec{NullAction: map[string]string{"q": "0"}} },
	} {
		info := ok()
		mod(info)
		err := info.Validate()
		assert.ErrorIs(t, err, env.ErrBadScenario, msg)
		assert.ErrorContains(t, err, msg)
	}
}

func TestRegistry(t *testing.T) {
	a := relayScenario(env.Sequential, 1, relayHooks{}, nil)
	r, err := env.NewRegistry(a)
	require.NoError(t, err)
	got, err := r.Lookup("relay")
	require.NoError(t, err)
	assert.Same(t, a.Info(), got.Info())
	_, err = r.Lookup("nope")
	assert.ErrorIs(t, err, env.ErrUnknownScenario)
	assert.ErrorContains(t, err, `"nope" (known: relay)`)
	_, err = env.NewRegistry(a, a)
	assert.ErrorContains(t, err, `two scenarios are called "relay"`)
}

func TestMemBusDeliveryOrder(t *testing.T) {
	b := env.NewMemBus()
	b.Reset([]string{"a", "b", "c"})
	b.Join(2, "team")
	b.Join(0, "team")
	b.Join(0, "team")
	send := func(from string, to protocol.Address, payload string, time int) {
		t.Helper()
		err := b.Send(protocol.Message{From: from, To: to, Kind: "k", Payload: payload}, time)
		require.NoError(t, err)
	}
	send("a", protocol.Broadcast, "1", 1)
	send("env", protocol.To("b"), "2", 1)
	send("c", protocol.Channel("team"), "3", 1)
	assert.Empty(t, b.Mailbox(1), "nothing is delivered before Deliver")
	b.Deliver()
	payloads := func(seat int) (out []string) {
		for _, m := range b.Mailbox(seat) {
			out = append(out, m.Payload)
		}
		return out
	}
	assert.Equal(t, []string{"3"}, payloads(0), "a hears the team channel, not its own broadcast")
	assert.Equal(t, []string{"1", "2"}, payloads(1))
	assert.Equal(t, []string{"1"}, payloads(2), "c does not hear its own channel message")
	for i, m := range b.Log() {
		assert.Equal(t, i, m.Seq)
		assert.Equal(t, 1, m.Time)
	}
	b.Leave(0, "team")
	send("c", protocol.Channel("team"), "4", 2)
	b.Deliver()
	assert.Equal(t, []string{"3"}, payloads(0))

	for to, msg := range map[protocol.Address]string{
		"zed":                    `agent "a" sends to "zed", which is not an agent`,
		protocol.Channel("none"): `agent "a" sends to channel "none", which has never had a member`,
	} {
		err := b.Send(protocol.Message{From: "a", To: to}, 3)
		assert.ErrorIs(t, err, env.ErrBadMessage)
		assert.ErrorContains(t, err, msg)
	}
	err := b.Send(protocol.Message{From: "mallory", To: "a"}, 3)
	assert.ErrorContains(t, err, `sender "mallory" is not an agent`)

	log := b.Log()
	b.Reset([]string{"x"})
	assert.Len(t, log, 4, "the previous episode keeps its log")
	assert.Empty(t, b.Log())
	assert.Empty(t, b.Mailbox(0))
}

func TestNumbered(t *testing.T) {
	seats := env.Numbered("citizen", 3)
	want := []env.Seat{{ID: "citizen-0", Role: "citizen"}, {ID: "citizen-1", Role: "citizen"}, {ID: "citizen-2", Role: "citizen"}}
	if !slices.Equal(seats, want) {
		t.Errorf("Numbered: %v, want %v", seats, want)
	}
	if len(env.Numbered("x", 0)) != 0 {
		t.Error("Numbered(x, 0) has seats")
	}
}
