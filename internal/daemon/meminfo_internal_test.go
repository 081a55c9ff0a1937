package daemon

import "testing"

func TestParseMeminfo(t *testing.T) {
	avail, total, err := parseMeminfo([]byte("MemTotal:        8048576 kB\nMemFree:  100 kB\nMemAvailable:    2097152 kB\n"))
	if err != nil || avail != 2048 || total != 7859 {
		t.Errorf("parseMeminfo: %d %d %v, want 2048 7859", avail, total, err)
	}
	for _, bad := range []string{"", "MemTotal: 10 kB\n", "MemTotal: x kB\nMemAvailable: 1 kB\n"} {
		if _, _, err := parseMeminfo([]byte(bad)); err == nil {
			t.Errorf("parseMeminfo(%q): no error", bad)
		}
	}
	if _, _, err := hostMemory(); err != nil {
		t.Errorf("this host's /proc/meminfo: %v", err)
	}
}
