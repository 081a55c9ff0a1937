// The dashboard's only script: a minimal terminal for the sandbox page.
// It speaks the terminal WebSocket of /ui/sandboxes/{id}/terminal: the
// first text message is a JSON control message, binary messages are the
// terminal's output, and every message sent is input. The terminal runs
// with TERM=dumb; escape sequences that slip through are dropped.
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

  // The terminal's size in characters, measured once: the server clamps it.
  var probe = document.createElement('span');
  probe.className = 'probe';
  probe.textContent = 'MMMMMMMMMM';
  term.appendChild(probe);
  var box = probe.getBoundingClientRect();
  term.removeChild(probe);
  var cols = box.width > 0 ? Math.floor((term.clientWidth - 28) / (box.width / 10)) : 100;
  var rows = box.height > 0 ? Math.floor((term.clientHeight - 20) / box.height) : 30;

  var proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  var url = proto + '//' + location.host + term.dataset.ws +
    '?csrf=' + encodeURIComponent(term.dataset.csrf) + '&cols=' + cols + '&rows=' + rows;
  var ws = new WebSocket(url);
  ws.binaryType = 'arraybuffer';
  setStatus('connecting');
  ws.onmessage = function (ev) {
    if (typeof ev.data === 'string') {
      var msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      if (msg.status === 'connected') { setStatus('connected'); }
      if (msg.status === 'error') { setStatus('error: ' + (msg.error || 'the terminal failed')); }
      return;
    }
    write(decoder.decode(new Uint8Array(ev.data), {stream: true}));
  };
  ws.onclose = function (ev) {
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
