package account

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// lookupPasswd scans the passwd(5) file at path for name. Malformed lines
// are skipped, as getpwnam does.
func lookupPasswd(path, name string) (User, error) {
	f, err := os.Open(path)
	if err != nil {
		return User{}, fmt.Errorf("look up user %q: %w", name, err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if u, ok := parsePasswdLine(s.Text()); ok && u.Name == name {
			return u, nil
		}
	}
	if err := s.Err(); err != nil {
		return User{}, fmt.Errorf("look up user %q: read %s: %w", name, path, err)
	}
	return User{}, fmt.Errorf("%w: %q", ErrUnknownUser, name)
}

// parsePasswdLine parses "name:password:uid:gid:gecos:home:shell".
func parsePasswdLine(line string) (User, bool) {
	if line == "" || line[0] == '#' {
		return User{}, false
	}
	f := strings.Split(line, ":")
	if len(f) < 7 || f[0] == "" {
		return User{}, false
	}
	uid, err := strconv.ParseUint(f[2], 10, 32)
	if err != nil {
		return User{}, false
	}
	gid, err := strconv.ParseUint(f[3], 10, 32)
	if err != nil {
		return User{}, false
	}
	return User{Name: f[0], UID: uint32(uid), GID: uint32(gid), Home: f[5]}, true
}
