package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// hostMemory reads MemAvailable and MemTotal from /proc/meminfo, in MB
// (service.HostMemory).
func hostMemory() (availableMB, totalMB int64, err error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	return parseMeminfo(b)
}

// parseMeminfo reads the two fields from a /proc/meminfo text ("MemTotal:
// 16314020 kB" lines).
func parseMeminfo(b []byte) (availableMB, totalMB int64, err error) {
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 {
			continue
		}
		var dst *int64
		switch string(f[0]) {
		case "MemTotal:":
			dst = &totalMB
		case "MemAvailable:":
			dst = &availableMB
		default:
			continue
		}
		kb, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("meminfo %s: %w", f[0], err)
		}
		*dst = kb >> 10
		found++
	}
	if found != 2 || totalMB <= 0 {
		return 0, 0, fmt.Errorf("meminfo: no MemTotal and MemAvailable")
	}
	return availableMB, totalMB, nil
}
