package protocol

// AppendString appends s to dst as a JSON string, exactly as Sample's
// encoder writes strings: invalid UTF-8 becomes U+FFFD, control characters
// are escaped, and so are U+2028 and U+2029. Packages that hand-write JSON
// next to samples (wire formats, HTTP answers) use it so that every string
// troupe writes is escaped one way.
func AppendString(dst []byte, s string) []byte { return appendString(dst, s) }

// AppendFloat appends f to dst as a JSON number, formatted as encoding/json
// formats float64; NaN and infinities, which JSON cannot hold, become null.
func AppendFloat(dst []byte, f float64) []byte { return appendFloat(dst, f) }
