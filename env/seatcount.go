package env

// SeatCounter is implemented by a scenario whose parameters set how many
// seats its episodes have (El Farol's agents): SeatCount tells the seats
// of an episode under p without building its game. A server that caps
// the seats of the episodes it is asked for (troupe env-serve's
// --max-seats) refuses one over its cap by this count, before paying for
// its seats; a scenario without it is counted once its game is built.
type SeatCounter interface {
	SeatCount(p Params) int
}
