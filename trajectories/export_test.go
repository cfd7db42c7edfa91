package trajectories

// FlushThreshold exposes flushThreshold to the external tests, which check
// that JSONLWriter holds back writes until it is reached.
const FlushThreshold = flushThreshold

// AppendEpisodeJSONReflect is the episode line as encoding/json writes it,
// the reference the hand-written encoder is checked against.
var AppendEpisodeJSONReflect = appendEpisodeJSONReflect

// AppendJSONString is the episode encoder's string escaping.
var AppendJSONString = appendJSONString
