package env

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/strcmp"
	"github.com/troupe-rl/troupe/protocol"
)

// Bus carries messages between the agents of one episode.
//
// Delivery order is deterministic: a message sent during step t is delivered
// at the end of step t (visible from step t+1 on), and every mailbox receives
// messages in the order they were sent. Within a step the game applies moves
// in seat order, so messages are ordered by (logical time, seat order of the
// move that caused them, order of sending). A broadcast or channel message
// reaches every recipient except its sender.
//
// A message's recipients are fixed when it is sent, and recorded with it in
// the log: one agent for a direct message, every agent but the sender for a
// broadcast, the channel's members at that moment but the sender for a
// channel message. Absent seats of a counterfactual are recipients like any
// other (they are never scheduled, so they never read their mail).
//
// Channels follow these rules:
//
//   - Anyone may send to a channel: a member, an agent that is not one, or
//     the environment. A channel is an address, like a mailing list; who may
//     speak when is the game's rule (it decides which moves send what), and
//     a referee posting to a team's channel is the common case.
//   - A channel exists from the first Join of the episode on. Sending to a
//     channel that has never had a member is an error naming the channel
//     and the sender: such an address is a typo or a missing Join, never a
//     move of the game.
//   - Sending to a channel that exists but has no member now (all left) is
//     not an error: the message is logged with no recipients and reaches no
//     one. An empty room is a state of play (a team whose members have all
//     finished), and the log says who heard it: nobody.
//   - Join and Leave take effect at once, for the messages sent after them:
//     a seat receives a channel's messages sent while it is a member, even
//     if it leaves before their delivery at the end of the step, and none
//     sent before it joined. Reset empties every channel.
//
// A message may be Quiet (protocol.Message.Quiet): it is delivered, logged
// and shown in the recipient's Inbox and Seen like any other, but does not
// by itself make an agent act under the Async schedule (see Step.Inform).
//
// A Bus serves one episode at a time and is not safe for concurrent use;
// Reset readies it for the next episode.
type Bus interface {
	// Reset starts a new episode whose agents are ids, in seat order.
	Reset(ids []string)
	// Join adds seat to channel (creating it); joining twice is harmless.
	Join(seat int, channel string)
	// Leave removes seat from channel; the channel goes on existing.
	Leave(seat int, channel string)
	// Send validates m, stamps its Time and Seq, fixes its recipients and
	// queues it. Errors wrap ErrBadMessage.
	Send(m protocol.Message, time int) error
	// Deliver moves every queued message into its recipients' mailboxes.
	Deliver()
	// Mailbox returns every message delivered to seat so far, in delivery
	// order. The caller must not modify or keep it past the next Deliver.
	Mailbox(seat int) []protocol.Message
	// Log returns every message sent in this episode, in send order, with
	// the seats it is delivered to (fixed when it was sent, also for a
	// message still queued). The slice belongs to the caller after the
	// episode; Reset starts a new one.
	Log() []episode.Message
}

// ErrBadMessage is wrapped by Send's errors.
var ErrBadMessage = errors.New("bad message")

// MemBus is the in-process Bus.
type MemBus struct {
	ids      []string
	index    map[string]int
	channels map[string][]int // members in seat order
	mail     [][]protocol.Message
	// filled lists the seats whose mailboxes got mail this episode, the
	// ones Reset empties: a game of a hundred seats that sends nothing
	// (El Farol) has none to empty.
	filled []int
	queue  int // log[queue:] is not yet delivered
	log    []episode.Message
	// recipients backs the log's Recipients: one array per episode,
	// sliced, rather than one per message.
	recipients []int
	// logHint and recipientsHint are about the largest sizes of the last
	// episodes' log and recipients: the next episode's start with that
	// capacity rather than growing, copy after copy, to it.
	logHint, recipientsHint int
	// spareLog and spareRecipients, when lent (lend), are the arrays the
	// next episode writes its log and recipients into.
	spareLog        []episode.Message
	spareRecipients []int
}

// NewMemBus returns an empty in-process bus.
func NewMemBus() *MemBus { return &MemBus{} }

// Reset implements Bus.
func (b *MemBus) Reset(ids []string) {
	// The engine hands out the same ids slice for the same seats, and a
	// fresh one otherwise: the index of the same slice is still right.
	if len(ids) == 0 || len(b.ids) != len(ids) || &b.ids[0] != &ids[0] {
		if b.index == nil {
			b.index = make(map[string]int, len(ids))
		}
		clear(b.index)
		for i, id := range ids {
			b.index[id] = i
		}
	}
	b.ids = ids
	clear(b.channels)
	for _, i := range b.filled {
		b.mail[i] = b.mail[i][:0]
	}
	b.filled = b.filled[:0]
	if cap(b.mail) < len(ids) {
		b.mail = make([][]protocol.Message, len(ids))
	}
	b.mail = b.mail[:len(ids)]
	b.queue = 0
	// The previous episode keeps its log and its recipients; the next one
	// writes into lent arrays (lend) or new ones.
	b.logHint, b.recipientsHint = hint(b.logHint, len(b.log)), hint(b.recipientsHint, len(b.recipients))
	b.log, b.recipients = b.spareLog, b.spareRecipients
	b.spareLog, b.spareRecipients = nil, nil
	if cap(b.log) < b.logHint {
		b.log = make([]episode.Message, 0, b.logHint)
	}
	if cap(b.recipients) < b.recipientsHint {
		b.recipients = make([]int, 0, b.recipientsHint)
	}
}

// lend gives the bus arrays for the next episode's log and recipients (see
// record): empty, and not used by anyone else from now on. The engine
// lends a recycled record's arrays, or a replay's own, which nothing kept.
func (b *MemBus) lend(log []episode.Message, recipients []int) {
	b.spareLog, b.spareRecipients = log[:0], recipients[:0]
}

// arrays returns the arrays behind the current episode's log and
// recipients, whether or not a message used them.
func (b *MemBus) arrays() ([]episode.Message, []int) { return b.log, b.recipients }

// Join implements Bus.
func (b *MemBus) Join(seat int, channel string) {
	if b.channels == nil {
		b.channels = map[string][]int{}
	}
	members := b.channels[channel]
	if i, found := slices.BinarySearch(members, seat); !found {
		b.channels[channel] = slices.Insert(members, i, seat)
	}
}

// Leave implements Bus.
func (b *MemBus) Leave(seat int, channel string) {
	members := b.channels[channel]
	if i, found := slices.BinarySearch(members, seat); found {
		b.channels[channel] = slices.Delete(members, i, i+1)
	}
}

// Send implements Bus.
func (b *MemBus) Send(m protocol.Message, time int) error {
	return b.post(m.From, m.To, m.Kind, m.Payload, m.Quiet, time)
}

// post is Send with the message's fields as arguments: the engine's
// steps send through it, and the message is built only once, in place in
// the log, rather than as a value copied from call to call.
func (b *MemBus) post(from string, to protocol.Address, kind, payload string, quiet bool, time int) error {
	// self is the sender's seat, which a broadcast or channel message
	// does not reach; -1 for the environment.
	self := -1
	if from != protocol.EnvSender {
		i, ok := b.seatOf(from)
		if !ok {
			return fmt.Errorf("%w: sender %q is not an agent of this episode", ErrBadMessage, from)
		}
		self = i
	}
	start := len(b.recipients)
	switch {
	case to.IsBroadcast():
		for i := range b.ids {
			if i != self {
				b.recipients = append(b.recipients, i)
			}
		}
	case strings.HasPrefix(string(to), "#"):
		name, _ := to.ChannelName()
		members, ok := b.channels[name]
		if !ok {
			return fmt.Errorf("%w: %s sends to channel %q, which has never had a member (Join it first)", ErrBadMessage, sender(from), name)
		}
		for _, i := range members {
			if i != self {
				b.recipients = append(b.recipients, i)
			}
		}
	default:
		i, ok := b.seatOf(string(to))
		if !ok {
			return fmt.Errorf("%w: %s sends to %q, which is not an agent of this episode", ErrBadMessage, sender(from), to)
		}
		b.recipients = append(b.recipients, i)
	}
	// Every field is written, in place (extend): the element may hold a
	// recycled record's message.
	n := len(b.log)
	b.log = extend(b.log)
	m := &b.log[n]
	m.From, m.To, m.Kind, m.Payload, m.Quiet = from, to, kind, payload, quiet
	m.Time, m.Seq = time, n
	// Recipients are nil until some message of the episode had one, as
	// when the array was allocated by the first append.
	m.Recipients = nil
	if len(b.recipients) > 0 {
		m.Recipients = b.recipients[start:len(b.recipients):len(b.recipients)]
	}
	return nil
}

// seatOf returns the seat of the agent called id. A few seats are
// scanned: comparing an id with the seat's own string, usually the same
// bytes, is cheaper than hashing it.
func (b *MemBus) seatOf(id string) (int, bool) {
	if len(b.ids) <= 8 {
		for i, s := range b.ids {
			if strcmp.Equal(s, id) {
				return i, true
			}
		}
		return 0, false
	}
	i, ok := b.index[id]
	return i, ok
}

// sender names a message's sender in an error.
func sender(from string) string {
	if from == protocol.EnvSender {
		return "the environment"
	}
	return fmt.Sprintf("agent %q", from)
}

// Deliver implements Bus.
func (b *MemBus) Deliver() {
	for k := b.queue; k < len(b.log); k++ {
		m := &b.log[k].Message
		for _, i := range b.log[k].Recipients {
			// Copied in place, field by field (extend): an appended value
			// is copied to the stack first.
			if len(b.mail[i]) == 0 {
				b.filled = append(b.filled, i)
			}
			box := extend(b.mail[i])
			d := &box[len(box)-1]
			d.From, d.To, d.Kind, d.Payload = m.From, m.To, m.Kind, m.Payload
			d.Time, d.Seq, d.Quiet = m.Time, m.Seq, m.Quiet
			b.mail[i] = box
		}
	}
	b.queue = len(b.log)
}

// Mailbox implements Bus.
func (b *MemBus) Mailbox(seat int) []protocol.Message { return b.mail[seat] }

// Log implements Bus.
// It is nil when no message was sent.
func (b *MemBus) Log() []episode.Message {
	if len(b.log) == 0 {
		return nil
	}
	return b.log
}
