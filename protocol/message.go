package protocol

import "strings"

// Address names who receives a message: one agent (its id), everyone
// (Broadcast), or the members of a named channel (Channel("name")).
type Address string

// Broadcast addresses every agent of the episode except the sender.
const Broadcast Address = "*"

// EnvSender is the sender of messages the environment itself emits (rules,
// referee announcements, private observations handed out at setup).
const EnvSender = "env"

// channelPrefix marks a channel address. Agent ids may not start with it.
const channelPrefix = "#"

// To addresses a single agent.
func To(agent string) Address { return Address(agent) }

// Channel addresses the members of the named channel.
func Channel(name string) Address { return Address(channelPrefix + name) }

// IsBroadcast reports whether a addresses every agent.
func (a Address) IsBroadcast() bool { return a == Broadcast }

// ChannelName returns the channel's name and true when a addresses a channel.
func (a Address) ChannelName() (string, bool) {
	s := string(a)
	if strings.HasPrefix(s, channelPrefix) {
		return s[len(channelPrefix):], true
	}
	return "", false
}

// Agent returns the addressee's id and true when a addresses a single agent.
func (a Address) Agent() (string, bool) {
	if a == Broadcast || a == "" {
		return "", false
	}
	if _, ok := a.ChannelName(); ok {
		return "", false
	}
	return string(a), true
}

// Message is one unit of communication on the bus.
//
// Time is the logical time (the episode's step counter) at which the message
// was sent; Seq is its position in the episode's total order of messages, so
// (Time, Seq) orders every message of an episode. Both are set by the bus.
//
// Quiet marks a message that informs without waking: it is delivered,
// logged and read like any other (it is in the recipient's inbox at its
// next turn), but it does not by itself make its recipient act where unread
// mail would (env's Async schedule, for a role that declares no acting
// states). A game hands out information this way (a price update, a
// private fact) without giving the agent a turn.
type Message struct {
	From    string  `json:"from"`
	To      Address `json:"to"`
	Kind    string  `json:"kind"`
	Payload string  `json:"payload"`
	Time    int     `json:"time"`
	Seq     int     `json:"seq"`
	Quiet   bool    `json:"quiet,omitempty"`
}
