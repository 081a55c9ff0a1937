package warmpool

import "time"

// Adaptive makes a class's target follow demand: it grows while creates
// of the class find the pool empty and shrinks back when idle sandboxes
// sit unclaimed. Min is the class's configured size (the pool never keeps
// fewer), Max the most it keeps, Window both the span of recent demand it
// reads and the idle age past which an idle sandbox beyond Min is given
// up. A class whose Max is not above its Min keeps a fixed size.
type Adaptive struct {
	Min, Max int
	Window   time.Duration
}

// On reports whether the class's target follows demand at all.
func (a Adaptive) On() bool { return a.Max > a.Min && a.Window > 0 }

// Bounds of the adaptive mode.
const (
	// DefaultWindow is the window of an adaptive class that names none:
	// long enough that a burst's refill (about 2.6 sandboxes a second
	// here) lands inside it, short enough that an idle surplus is given
	// back within a minute.
	DefaultWindow = time.Minute
	// MinWindow and MaxWindow bound a window.
	MinWindow = time.Second
	MaxWindow = 24 * time.Hour
	// growShare is the share of the host's free budget one growth may
	// take: the rest stays free for tenants' cold creates, which would
	// otherwise each pay an eviction (a container destroy) on the way.
	growShare = 2
)

// Demand is what Decide reads of one adaptive class at one moment.
type Demand struct {
	// Target is the class's target now; Supply what it has or will have
	// (idle, being made, being claimed).
	Target, Supply int
	// Claims are the times creates took an idle sandbox of the class,
	// Misses the times creates of the class found none and were served
	// cold; only those inside the window count.
	Claims, Misses []time.Time
	// IdleSince are the times the class's idle sandboxes joined the pool.
	IdleSince []time.Time
	// Room is how many more sandboxes of the class the host's budget lets
	// the pool make now (already scaled by growShare).
	Room int
}

// Decision is what Decide answers: the class's target from now, how many
// of its oldest idle sandboxes to give up (each idle longer than the
// window), and when the answer may change without a new claim or miss
// (zero: not until one).
type Decision struct {
	Target  int
	Release int
	Next    time.Time
}

// Decide is the adaptive rule, a pure function of the class's
// configuration, its recent demand and now:
//
//   - a miss in the window (a create of the class found the pool empty)
//     grows the target to the window's demand (claims plus misses), never
//     past Max, nor past what the host's budget has room for now;
//   - with no miss in the window, each idle sandbox that has waited a
//     whole window unclaimed is given up and the target drops by one, never
//     below Min. (A pool larger than a window's demand is exactly one whose
//     oldest idle sandbox waits longer than a window: claims take the
//     oldest first.)
//
// A target outside [Min, Max] (the configuration changed) is brought
// into it first.
func Decide(a Adaptive, d Demand, now time.Time) Decision {
	target := min(max(d.Target, a.Min), a.Max)
	cutoff := now.Add(-a.Window)
	claims, misses := countAfter(d.Claims, cutoff), countAfter(d.Misses, cutoff)
	var lastMiss time.Time
	for _, t := range d.Misses {
		if t.After(lastMiss) {
			lastMiss = t
		}
	}
	if misses > 0 {
		if want := min(claims+misses, a.Max); want > target {
			target = max(target, min(want, d.Supply+max(d.Room, 0)))
		}
		// No shrink while demand outran the pool inside the window: the
		// idle sandboxes now are the refill of that demand.
		var next time.Time
		if target > a.Min {
			next = lastMiss.Add(a.Window)
		}
		return Decision{Target: target, Next: next}
	}
	release := 0
	var oldestKept time.Time
	for _, since := range d.IdleSince {
		if !since.After(cutoff) && release < target-a.Min {
			release++
			continue
		}
		if oldestKept.IsZero() || since.Before(oldestKept) {
			oldestKept = since
		}
	}
	target -= release
	var next time.Time
	if target > a.Min && !oldestKept.IsZero() {
		next = oldestKept.Add(a.Window)
	}
	return Decision{Target: target, Release: release, Next: next}
}

// countAfter counts the times after cutoff.
func countAfter(ts []time.Time, cutoff time.Time) int {
	n := 0
	for _, t := range ts {
		if t.After(cutoff) {
			n++
		}
	}
	return n
}

// remember appends t to ts, keeping only the times after cutoff and at
// most keep of them (the newest): Decide never needs more than Max of
// either kind, since it caps the demand at Max.
func remember(ts []time.Time, t, cutoff time.Time, keep int) []time.Time {
	out := ts[:0]
	for _, x := range ts {
		if x.After(cutoff) {
			out = append(out, x)
		}
	}
	out = append(out, t)
	if len(out) > keep {
		out = append(out[:0], out[len(out)-keep:]...)
	}
	return out
}
