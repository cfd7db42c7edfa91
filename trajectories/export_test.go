package trajectories

// FlushThreshold exposes flushThreshold to the external tests, which check
// that JSONLWriter holds back writes until it is reached.
const FlushThreshold = flushThreshold
