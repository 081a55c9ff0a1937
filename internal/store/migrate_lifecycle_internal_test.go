package store

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMigrate_LifecycleTakesOverTheDaytonaTags: migration 0015 turns the
// Daytona facade's reserved tags (intervals in minutes, archive marks)
// into the row's lifecycle columns, counts a running sandbox's idle time
// from the activity its facade-set expiry counted from, clears that
// expiry, and drops the tags; other rows keep their expiry and tags.
func TestMigrate_LifecycleTakesOverTheDaytonaTags(t *testing.T) {
	ctx := t.Context()
	migs, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	const v = 15
	db, err := openPool(ctx, writerDSN(filepath.Join(t.TempDir(), "s.db"), SynchronousFull), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrate(ctx, db, migs[:v-1]); err != nil {
		t.Fatal(err)
	}
	const activity = 5_000_000 // ms: the running sandbox's last activity
	for _, q := range []string{
		// Running, auto-stop 15, auto-delete 10: expired at activity + 25 min.
		`INSERT INTO sandboxes (id, image, state, created_at, updated_at, expires_at, tags) VALUES ('sb-run', 'img', 'running', 1, 1000, 6500000,
			'{"daytona/auto-stop":"15","daytona/auto-delete":"10","daytona/auto-archive":"0","team":"a"}')`,
		// Stopped by the facade at 3000 s, archived on request.
		`INSERT INTO sandboxes (id, image, state, created_at, updated_at, tags) VALUES ('sb-stop', 'img', 'stopped', 1, 4000000,
			'{"daytona/auto-stop":"0","daytona/auto-delete":"-1","daytona/stopped-at":"3000","daytona/archived":"true"}')`,
		// Stopped, auto-delete at the stop, auto-archive 90.
		`INSERT INTO sandboxes (id, image, state, created_at, updated_at, tags) VALUES ('sb-del', 'img', 'stopped', 1, 7000,
			'{"daytona/auto-stop":"5","daytona/auto-delete":"0","daytona/auto-archive":"90"}')`,
		`INSERT INTO sandboxes (id, image, state, created_at, updated_at, expires_at, tags) VALUES ('sb-native', 'img', 'running', 1, 2000, 777, '{"x":"y"}')`,
		// A value that is not a number of minutes is never, as the facade read it.
		`INSERT INTO sandboxes (id, image, state, created_at, updated_at, tags) VALUES ('sb-garbage', 'img', 'stopped', 1, 8000,
			'{"daytona/auto-stop":"0","daytona/auto-delete":"soon"}')`,
		`INSERT INTO sandboxes (id, image, state, created_at, updated_at) VALUES ('sb-native-stopped', 'img', 'stopped', 1, 9000)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := migrate(ctx, db, migs); err != nil {
		t.Fatal(err)
	}
	type view struct {
		Lifecycle                               Lifecycle
		LastActivity, Stopped, Archived, Expiry int64 // ms; 0: none
		Tags                                    map[string]string
	}
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	for id, want := range map[string]view{
		"sb-run": {Lifecycle: Lifecycle{AutoStop: 15 * time.Minute, AutoDelete: 10 * time.Minute, AutoArchive: 43200 * time.Minute},
			LastActivity: activity, Tags: map[string]string{"team": "a"}},
		"sb-stop": {Lifecycle: Lifecycle{AutoArchive: 7 * 24 * time.Hour}, Stopped: 3_000_000, Archived: 4_000_000, Tags: map[string]string{}},
		"sb-del": {Lifecycle: Lifecycle{AutoStop: 5 * time.Minute, DeleteOnStop: true, AutoArchive: 90 * time.Minute},
			Stopped: 7000, Tags: map[string]string{}},
		"sb-native":         {LastActivity: 2000, Expiry: 777, Tags: map[string]string{"x": "y"}},
		"sb-garbage":        {Lifecycle: Lifecycle{AutoArchive: 7 * 24 * time.Hour}, Stopped: 8000, Tags: map[string]string{}},
		"sb-native-stopped": {Stopped: 9000, Tags: map[string]string{}},
	} {
		sb, err := scanSandbox(db.QueryRowContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE id = ?`, id))
		if err != nil {
			t.Fatal(err)
		}
		got := view{sb.Lifecycle, ms(sb.LastActivityAt), ms(sb.StoppedAt), ms(sb.ArchivedAt), ms(sb.ExpiresAt), sb.Tags}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s after the migration (-want +got):\n%s", id, diff)
		}
	}
}
