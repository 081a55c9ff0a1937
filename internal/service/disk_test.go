package service

import "testing"

func TestParseDF(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want Disk
		ok   bool
	}{
		{"coreutils", "Filesystem     1024-blocks     Used Available Capacity Mounted on\noverlay          102626232 51234567  46129101      53% /\n", Disk{Used: 51234567 * 1024, Total: 102626232 * 1024}, true},
		{"busybox", "Filesystem           1024-blocks    Used Available Capacity Mounted on\noverlay                 1000       10       990   1% /\n", Disk{Used: 10240, Total: 1024000}, true},
		{"spaces in the name", "Filesystem 1024-blocks Used Available Capacity Mounted on\nmy disk 100 40 60 40% /\n", Disk{Used: 40 * 1024, Total: 100 * 1024}, true},
		{"empty", "", Disk{}, false},
		{"no line", "Filesystem 1024-blocks Used Available Capacity Mounted on\n", Disk{}, false},
		{"not numbers", "Filesystem 1024-blocks Used Available Capacity Mounted on\noverlay a b c d% /\n", Disk{}, false},
		{"used beyond total", "Filesystem 1024-blocks Used Available Capacity Mounted on\noverlay 10 20 0 200% /\n", Disk{}, false},
		{"absurd total", "Filesystem 1024-blocks Used Available Capacity Mounted on\noverlay 99999999999999999 1 1 1% /\n", Disk{}, false},
		{"no header", "overlay 100 40 60 40% /\n", Disk{}, false},
	} {
		got, err := parseDF([]byte(tc.out))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: parseDF = %+v, %v; want %+v, ok %v", tc.name, got, err, tc.want, tc.ok)
		}
	}
}
