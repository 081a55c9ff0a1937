package files_test

import (
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/url"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

const (
	largeSize = 100 << 20
	// maxHeapGrowth is far below largeSize: a handler that buffered the
	// file would blow it, a streaming one stays within a few buffers.
	maxHeapGrowth = 20 << 20
)

// randomReader yields n deterministic pseudo-random bytes.
func randomReader(n int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{1, 2, 3}), n)
}

// heapWatch samples the live heap until stop is called and returns the peak
// growth over the heap at start.
func heapWatch(t *testing.T) (stop func() uint64) {
	t.Helper()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	done := make(chan struct{})
	var wg sync.WaitGroup
	var peak uint64
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		if peak < base {
			return 0
		}
		return peak - base
	}
}

func TestLargeFile_StreamsBothWays(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 200 MB")
	}
	e := newEnv(t)
	dest := filepath.Join(e.dir, "big.bin")
	want := sha256.New()

	stop := heapWatch(t)
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		w, err := mw.CreateFormFile("file", dest)
		if err == nil {
			_, err = io.Copy(io.MultiWriter(w, want), randomReader(largeSize))
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, _ := http.NewRequest(http.MethodPost, filesURL(nil), pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	code, _, apiErr := e.do(t, req)
	if code != http.StatusOK {
		t.Fatalf("upload: %d %+v", code, apiErr)
	}
	growth := stop()
	t.Logf("upload: peak heap growth %.1f MB", float64(growth)/(1<<20))
	if growth > maxHeapGrowth {
		t.Errorf("upload grew the heap by %d MB, want < %d MB", growth>>20, maxHeapGrowth>>20)
	}

	stop = heapWatch(t)
	resp, err := e.client.Get(filesURL(url.Values{"path": {dest}}))
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	growth = stop()
	t.Logf("download: peak heap growth %.1f MB", float64(growth)/(1<<20))
	if growth > maxHeapGrowth {
		t.Errorf("download grew the heap by %d MB, want < %d MB", growth>>20, maxHeapGrowth>>20)
	}
	if n != largeSize || resp.ContentLength != largeSize {
		t.Errorf("downloaded %d bytes, Content-Length %d, want %d", n, resp.ContentLength, largeSize)
	}
	if string(got.Sum(nil)) != string(want.Sum(nil)) {
		t.Error("downloaded checksum differs from uploaded")
	}
}
