package agent

import "time"

// SetLogReadTimeout makes c's Logs calls without Follow read for at most
// d (logReadTimeout otherwise).
func SetLogReadTimeout(c *Client, d time.Duration) { c.logReadTimeout = d }
