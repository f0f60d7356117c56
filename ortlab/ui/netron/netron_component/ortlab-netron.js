// ortlab: the bridge between Streamlit (custom component protocol, API version 1) and the patched Netron
// viewer served from the app's own origin. Streamlit hands the model over as bytes arguments (f0, f1, …
// named by `names`); they are opened as in-memory files, exactly as if dropped onto the viewer. Nothing is
// fetched from anywhere: the files arrive through the app's own WebSocket.
(function () {
    'use strict';
    var host = null;
    var pending = null;
    var shown = null;

    // Netron focuses its graph when a model opens. Inside Streamlit's page that focus scrolls the app down to
    // the viewer and takes the keyboard away (a second after every visit). Until the person clicks or types in
    // the viewer, focus() does nothing; after that it never scrolls the page.
    var touched = false;
    ['pointerdown', 'keydown', 'wheel', 'touchstart'].forEach(function (type) {
        window.addEventListener(type, function () { touched = true; }, true);
    });
    [window.HTMLElement, window.SVGElement].forEach(function (kind) {
        if (!kind || !kind.prototype || !kind.prototype.focus) {
            return;
        }
        var focus = kind.prototype.focus;
        kind.prototype.focus = function (options) {
            if (!touched) {
                return;
            }
            var opts = {};
            for (var k in options || {}) {
                opts[k] = options[k];
            }
            opts.preventScroll = true;
            return focus.call(this, opts);
        };
    });

    function send(type, data) {
        var message = { isStreamlitMessage: true, type: type };
        for (var k in data || {}) {
            message[k] = data[k];
        }
        // The app page and this viewer share one origin (the viewer is a Streamlit component).
        window.parent.postMessage(message, window.location.origin);
    }

    function open() {
        if (!host || !pending || pending.digest === shown) {
            return;
        }
        var args = pending;
        var names = Array.isArray(args.names) ? args.names : [];
        var files = [];
        for (var i = 0; i < names.length; i++) {
            var data = args['f' + i];
            if (!(data instanceof Uint8Array)) {
                return;
            }
            files.push(new File([data], String(names[i]), { type: 'application/octet-stream' }));
        }
        if (files.length === 0) {
            return;
        }
        shown = args.digest;
        document.title = String(names[0]);
        host._open(files[0], files);
    }

    window.addEventListener('message', function (event) {
        if (event.source !== window.parent || event.origin !== window.location.origin) {
            return;
        }
        var data = event.data || {};
        if (data.type !== 'streamlit:render' || !data.args) {
            return;
        }
        pending = data.args;
        if (typeof pending.height === 'number') {
            send('streamlit:setFrameHeight', { height: pending.height });
        }
        open();
    });

    // Raised by the patched browser.js once Netron's host has started (see ortlab/ui/netron/assets.py).
    window.addEventListener('ortlab-netron-ready', function (event) {
        host = event.detail;
        document.body.setAttribute('data-ortlab-netron', 'ready');
        open();
    });

    send('streamlit:componentReady', { apiVersion: 1 });
})();
