// The dashboard's only script: a minimal terminal for the sandbox page,
// its logs pane, and the live usage of the sandboxes shown. Everything a
// sandbox or a tenant controls is written as text (textContent), never
// as HTML.
//
// The terminal speaks the terminal WebSocket of /ui/sandbox/{id}/terminal:
// the first text message is a JSON control message, binary messages are
// the terminal's output, and every message sent is input. It opens with
// the element's size in characters and sends each new size (the window or
// the element resized) to /ui/sandbox/{id}/terminal/resize. The terminal
// runs with TERM=dumb; escape sequences that slip through are dropped.
(function () {
  'use strict';
  var term = document.getElementById('terminal');
  if (!term) { return; }
  var status = document.getElementById('terminal-status');
  var maxChars = 200000;
  var lines = [''];
  var pendingCR = false;
  var decoder = new TextDecoder();

  function setStatus(s) { status.textContent = s; term.dataset.state = s; }

  function render() {
    var text = lines.join('\n');
    if (text.length > maxChars) {
      lines = text.slice(text.length - maxChars).split('\n');
      text = lines.join('\n');
    }
    term.textContent = text;
    term.scrollTop = term.scrollHeight;
  }

  var ansi = /\x1b\[[0-?]*[ -\/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]/g;

  function write(s) {
    s = s.replace(ansi, '');
    for (var i = 0; i < s.length; i++) {
      var c = s[i];
      var last = lines.length - 1;
      if (pendingCR) {
        pendingCR = false;
        if (c !== '\n') { lines[last] = ''; }
      }
      if (c === '\n') {
        lines.push('');
      } else if (c === '\r') {
        pendingCR = true;
      } else if (c === '\b') {
        lines[last] = lines[last].slice(0, -1);
      } else if (c === '\x07') {
        // bell
      } else {
        lines[last] += c;
      }
    }
    render();
  }

  // The terminal's size in characters, from the element's (the server
  // clamps it).
  function measure() {
    var probe = document.createElement('span');
    probe.className = 'probe';
    probe.textContent = 'MMMMMMMMMM';
    term.appendChild(probe);
    var box = probe.getBoundingClientRect();
    term.removeChild(probe);
    return {
      cols: box.width > 0 ? Math.floor((term.clientWidth - 28) / (box.width / 10)) : 100,
      rows: box.height > 0 ? Math.floor((term.clientHeight - 20) / box.height) : 30
    };
  }
  var size = measure();
  term.dataset.size = size.cols + 'x' + size.rows;

  // Resizes go one at a time, the latest size last; they start once the
  // terminal is connected (before, it has no size to change).
  var connected = false, resizing = false, timer = null;
  function resize() {
    if (!connected || resizing) { return; }
    var want = measure();
    if (want.cols === size.cols && want.rows === size.rows) { return; }
    resizing = true;
    fetch(term.dataset.resize, {
      method: 'POST',
      credentials: 'same-origin',
      headers: {'Content-Type': 'application/x-www-form-urlencoded', 'X-CSRF-Token': term.dataset.csrf},
      body: 'tid=' + encodeURIComponent(term.dataset.tid) + '&cols=' + want.cols + '&rows=' + want.rows
    }).then(function (resp) {
      resizing = false;
      if (resp.ok) {
        size = want;
        term.dataset.size = size.cols + 'x' + size.rows;
        resize(); // it may have changed again meanwhile
      }
    }, function () { resizing = false; });
  }
  function resized() {
    clearTimeout(timer);
    timer = setTimeout(resize, 150);
  }
  window.addEventListener('resize', resized);
  if (window.ResizeObserver) { new ResizeObserver(resized).observe(term); }

  var proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  var url = proto + '//' + location.host + term.dataset.ws +
    '?csrf=' + encodeURIComponent(term.dataset.csrf) + '&tid=' + encodeURIComponent(term.dataset.tid) +
    '&cols=' + size.cols + '&rows=' + size.rows;
  var ws = new WebSocket(url);
  ws.binaryType = 'arraybuffer';
  setStatus('connecting');
  ws.onmessage = function (ev) {
    if (typeof ev.data === 'string') {
      var msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      if (msg.status === 'connected') {
        connected = true;
        setStatus('connected');
        resize(); // the element may have changed size while it opened
      }
      if (msg.status === 'error') { setStatus('error: ' + (msg.error || 'the terminal failed')); }
      return;
    }
    write(decoder.decode(new Uint8Array(ev.data), {stream: true}));
  };
  ws.onclose = function (ev) {
    connected = false;
    setStatus('closed' + (ev.reason ? ': ' + ev.reason : ''));
  };

  function send(s) {
    if (ws.readyState === WebSocket.OPEN) { ws.send(s); }
  }

  var keys = {
    Enter: '\r', Backspace: '\x7f', Tab: '\t', Escape: '\x1b',
    ArrowUp: '\x1b[A', ArrowDown: '\x1b[B', ArrowRight: '\x1b[C', ArrowLeft: '\x1b[D',
    Home: '\x1b[H', End: '\x1b[F', Delete: '\x1b[3~'
  };
  term.addEventListener('keydown', function (e) {
    if (e.metaKey) { return; }
    var out = null;
    if (e.ctrlKey && e.key.length === 1) {
      var code = e.key.toLowerCase().charCodeAt(0);
      if (code >= 97 && code <= 122) { out = String.fromCharCode(code - 96); }
    } else if (keys[e.key] !== undefined) {
      out = keys[e.key];
    } else if (e.key.length === 1 && !e.altKey) {
      out = e.key;
    }
    if (out !== null) {
      e.preventDefault();
      send(out);
    }
  });
  term.addEventListener('paste', function (e) {
    e.preventDefault();
    send(e.clipboardData.getData('text'));
  });
})();


// csrfToken is the session's CSRF token (the logout form's field, on
// every page of a session): the live routes (logs, usage) want it in the
// X-CSRF-Token header, which no <img> or link of another page can send.
function csrfToken() {
  var f = document.querySelector('input[name="csrf"]');
  return f ? f.value : '';
}

// The logs pane: the sandbox's logs, followed while the page is open
// (GET /ui/sandbox/{id}/logs, NDJSON), each line written as text; the pane
// keeps the last maxLines. When the stream ends (the sandbox stopped, the
// connection broke) it reconnects with backoff, asking for the lines since
// the last one it has, and skips those it already shows.
(function () {
  'use strict';
  var pane = document.getElementById('logs');
  if (!pane) { return; }
  var status = document.getElementById('logs-status');
  var maxLines = 1000;
  var lastTime = '', sameTime = 0, delay = 2000;

  function setStatus(s) { status.textContent = s; pane.dataset.state = s; }

  function add(l) {
    var atBottom = pane.scrollTop + pane.clientHeight >= pane.scrollHeight - 4;
    var div = document.createElement('div');
    div.className = l.stream === 'stderr' ? 'line stderr' : 'line';
    div.textContent = String(l.time || '').slice(11, 19) + ' ' + String(l.source || '') + ' ' + String(l.text || '');
    pane.appendChild(div);
    while (pane.childElementCount > maxLines) { pane.removeChild(pane.firstChild); }
    if (atBottom) { pane.scrollTop = pane.scrollHeight; }
  }

  function connect() {
    var skipTime = lastTime, skip = lastTime ? sameTime : 0;
    var url = pane.dataset.src + (lastTime ? '?since=' + encodeURIComponent(lastTime) : '?tail=200');
    setStatus('following');
    fetch(url, {credentials: 'same-origin', headers: {'X-CSRF-Token': csrfToken()}}).then(function (resp) {
      if (resp.redirected) { setStatus('session ended: reload the page'); return 'stop'; }
      if (!resp.ok) {
        return resp.json().then(function (e) { setStatus('error: ' + e.error); }, function () { setStatus('error ' + resp.status); });
      }
      var reader = resp.body.getReader();
      var decoder = new TextDecoder();
      var buf = '';
      function pump() {
        return reader.read().then(function (r) {
          if (r.done) { return; }
          buf += decoder.decode(r.value, {stream: true});
          var i;
          while ((i = buf.indexOf('\n')) >= 0) {
            var text = buf.slice(0, i);
            buf = buf.slice(i + 1);
            var l;
            try { l = JSON.parse(text); } catch (e) { continue; }
            if (l.error) { setStatus('ended: ' + l.error); continue; }
            if (skip > 0 && l.time === skipTime) { skip--; continue; }
            skip = 0;
            if (l.time === lastTime) { sameTime++; } else { lastTime = l.time; sameTime = 1; }
            delay = 2000;
            add(l);
          }
          return pump();
        });
      }
      return pump();
    }).then(function (x) { if (x !== 'stop') { schedule(); } }, schedule);
  }

  function schedule() {
    if (pane.dataset.state === 'following') { setStatus('ended'); }
    setTimeout(connect, delay);
    delay = Math.min(delay * 2, 60000);
  }
  connect();
})();

// Live usage: the CPU, memory, disk and network of the sandboxes shown
// (GET /ui/usage, at most 20 ids a request, one request at a time): on a
// sandbox's page every 3 s, on the list every 5 s for the running rows
// in view (when more than 20 are, 20 more each time, in turn). Nothing
// is asked while the tab is hidden.
(function () {
  'use strict';
  var maxBatch = 20;
  var one = document.getElementById('usage');
  var table = document.getElementById('sandboxes');
  if (!one && !table) { return; }
  var every = one ? 3000 : 5000;
  var shown = {}; // id → element holding [data-usage] cells
  var inView = {};
  var cursor = 0;

  if (one) {
    shown[one.dataset.id] = one;
    inView[one.dataset.id] = true;
  } else {
    var rows = table.querySelectorAll('tr[data-id][data-state="running"]');
    var seen = function (entries) {
      entries.forEach(function (e) { inView[e.target.dataset.id] = e.isIntersecting; });
    };
    var io = window.IntersectionObserver ? new IntersectionObserver(seen) : null;
    for (var i = 0; i < rows.length; i++) {
      shown[rows[i].dataset.id] = rows[i];
      if (io) { io.observe(rows[i]); } else { inView[rows[i].dataset.id] = true; }
    }
  }

  function fill(el, u) {
    var cells = el.querySelectorAll('[data-usage]');
    for (var i = 0; i < cells.length; i++) {
      var k = cells[i].dataset.usage;
      if (u.error) {
        cells[i].textContent = cells[i].dataset.limit || '–';
        cells[i].title = u.error;
      } else {
        cells[i].textContent = (u.shown && u.shown[k]) || '';
        cells[i].title = '';
      }
    }
    if (!u.error) {
      el.dataset.samples = String(Number(el.dataset.samples || 0) + 1);
      el.dataset.cpuPercent = String(u.cpu_percent);
      el.dataset.diskBytes = String(u.disk_bytes);
      el.dataset.memoryBytes = String(u.memory_bytes);
    }
  }

  function batch() {
    var ids = Object.keys(shown).filter(function (id) { return inView[id]; });
    if (ids.length <= maxBatch) { return ids; }
    cursor = cursor % ids.length;
    var out = ids.slice(cursor, cursor + maxBatch);
    if (out.length < maxBatch) { out = out.concat(ids.slice(0, maxBatch - out.length)); }
    cursor += maxBatch;
    return out;
  }

  function poll() {
    var ids = document.hidden ? [] : batch();
    if (ids.length === 0) { setTimeout(poll, every); return; }
    var q = ids.map(function (id) { return 'id=' + encodeURIComponent(id); }).join('&');
    fetch('/ui/usage?' + q, {credentials: 'same-origin', headers: {'X-CSRF-Token': csrfToken()}}).then(function (resp) {
      if (resp.redirected || resp.status === 401) { return 'stop'; } // the session ended
      if (!resp.ok) { return; }
      return resp.json().then(function (body) {
        Object.keys(body.items || {}).forEach(function (id) {
          if (shown[id]) { fill(shown[id], body.items[id]); }
        });
      });
    }).then(function (x) { if (x !== 'stop') { setTimeout(poll, every); } },
      function () { setTimeout(poll, every); });
  }
  poll();
})();
