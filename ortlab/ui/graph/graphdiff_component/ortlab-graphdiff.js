// ortlab: the graph diff drawn with Cytoscape.js and dagre (both vendored, served by the app itself), as a
// Streamlit custom component (protocol API version 1): before and after side by side. Python
// (ortlab/ui/graph/graph_view.py) sends each side's whole group tree and which groups are open at first; this file
// shows and hides groups itself (no round trip to Python, so the page does not rerun and the zoom stays), a
// group together with its twin on the other side, lays out, lines matched groups up across the two panes,
// pans and zooms them together ("link panes"), and links a node to its match on the other side. It sends
// nothing back to Python. Text from the model is only ever set with textContent or drawn as canvas labels:
// nothing here parses it as HTML.
(function () {
    'use strict';
    var KIND = {
        removed: ['#d62728', '#fde0e0'], fused: ['#9467bd', '#eee3f7'], quantized: ['#1f77b4', '#dcebf7'],
        added: ['#2ca02c', '#dff2df'], changed: ['#f0a000', '#fff0cc'], unchanged: ['#9e9e9e', '#f3f3f3']
    };
    var FOUND = '#e600e6';  // the search highlight: magenta, unlike every change colour and the blue of a match
    var SIDES = ['before', 'after'];
    var OPEN_HITS = 80;  // at most this many hits (both sides) are drawn one by one, their groups opened
    var HINT = 'Click a node for its op, attributes, shapes and quantization scale and zero point; its match lights '
        + 'up on the other side. Click a ▸ box to open that layer on both sides.';
    var panes = {};
    var shown = null;
    var overlayOn = false;
    var READABLE = 0.55;  // the smallest zoom at which 12 px labels stay readable
    var reverseAffinity = {};
    // linked panes: on, a guard against following the pane being moved, the pane the person moved last, and
    // the matched pairs [before id, after id] that start at the same height in both layouts
    var link = { on: true, busy: false, last: null, chain: [] };

    function send(type, data) {
        var message = { isStreamlitMessage: true, type: type };
        for (var k in data || {}) {
            message[k] = data[k];
        }
        // The app page and this view share one origin (the view is a Streamlit component).
        window.parent.postMessage(message, window.location.origin);
    }

    function el(tag, text, cls) {
        var e = document.createElement(tag);
        if (text !== undefined && text !== null) {
            e.textContent = String(text);
        }
        if (cls) {
            e.className = cls;
        }
        return e;
    }

    // ``text`` as an element whose long names break after a '/', '_' or '.' first (a <wbr> there), anywhere
    // else only when a piece alone is too long for its cell
    function names(tag, text, cls) {
        var e = el(tag, null, cls);
        String(text === undefined || text === null ? '' : text).split(/(?<=[\/_.])/).forEach(function (piece, i) {
            if (i) {
                e.appendChild(document.createElement('wbr'));
            }
            e.appendChild(document.createTextNode(piece));
        });
        return e;
    }

    function clear(node) {
        while (node.firstChild) {
            node.removeChild(node.firstChild);
        }
    }

    function color(kind, i) {
        return (KIND[kind] || KIND.unchanged)[i];
    }

    function style() {
        return [
            { selector: 'node', style: {
                'shape': 'round-rectangle', 'label': 'data(label)',
                'text-wrap': 'wrap', 'text-valign': 'center', 'text-halign': 'center', 'font-size': 12,
                'line-height': 1.25, 'border-width': 2.5,
                'color': function (n) { return (overlayOn && n.data('value_ink')) || '#1e1e1e'; },
                'border-color': function (n) { return color(n.data('kind'), 0); },
                'background-color': function (n) {
                    if (overlayOn) {
                        return n.data('value_color') || '#ffffff';
                    }
                    return color(n.data('kind'), 1);
                },
                'min-zoomed-font-size': 0
            } },
            { selector: 'node[w]', style: { 'width': 'data(w)', 'height': 'data(h)' } },
            { selector: 'node.weight', style: { 'border-style': 'dotted', 'font-size': 11 } },
            { selector: 'node.closed', style: {
                'shape': 'rectangle', 'border-style': 'double', 'border-width': 4, 'font-weight': 600
            } },
            { selector: 'node.open', style: {
                'shape': 'round-rectangle', 'background-color': '#fbfbfb', 'background-opacity': 0.6,
                'border-width': 1.5, 'border-style': 'dashed', 'border-color': '#9a9a9a', 'text-valign': 'top',
                'text-halign': 'center', 'text-margin-y': -2, 'font-size': 12, 'color': '#444', 'padding': 14,
                'text-wrap': 'ellipsis', 'text-max-width': 300
            } },
            { selector: 'node:selected', style: { 'border-width': 5, 'border-color': '#000' } },
            { selector: 'node.match', style: { 'underlay-color': '#00a0ff', 'underlay-opacity': 0.5, 'underlay-padding': 7 } },
            { selector: 'node.found', style: { 'underlay-color': FOUND, 'underlay-opacity': 0.55, 'underlay-padding': 7 } },
            { selector: 'edge', style: {
                'width': 1.6, 'line-color': '#9a9a9a', 'target-arrow-color': '#9a9a9a', 'target-arrow-shape': 'triangle',
                'curve-style': 'bezier', 'arrow-scale': 0.9
            } },
            { selector: 'edge.removed', style: { 'line-style': 'dashed', 'line-color': '#e8a0a0', 'target-arrow-color': '#e8a0a0' } }
        ];
    }

    // -- one side: its group tree, which groups are open, and the Cytoscape instance drawing what is visible --
    function Pane(side, args) {
        this.side = side;
        this.box = document.getElementById('cy-' + side);
        this.data = {};
        this.order = [];
        this.parent = {};
        var self = this;
        (args.elements || []).forEach(function (e) {
            var d = e.data;
            self.data[d.id] = d;
            self.order.push(d.id);
            self.parent[d.id] = d.parent || null;
        });
        this.opened = {};
        (args.open || []).forEach(function (g) { self.opened[g] = true; });
        this.edges = args.edges || [];
        this.cy = null;
        this.moved = false;
    }

    Pane.prototype.rep = function (id) {  // what stands for ``id`` on screen: its outermost closed group, or itself
        var top = id;
        var x = this.parent[id];
        while (x) {
            if (!this.opened[x]) {
                top = x;
            }
            x = this.parent[x];
        }
        return top;
    };

    Pane.prototype.elements = function () {
        var out = [];
        var self = this;
        this.order.forEach(function (id) {
            if (self.rep(id) !== id) {
                return;
            }
            var src = self.data[id];
            var d = {};
            for (var k in src) {
                d[k] = src[k];
            }
            var cls = 'op' + (src.weight ? ' weight' : '');
            if (src.group) {
                d.open = !!self.opened[id];
                d.label = d.open ? src.label_open : src.label_closed;
                cls = d.open ? 'group open' : 'group closed';
                if (d.open) {
                    delete d.w;
                    delete d.h;
                }
            }
            out.push({ data: d, classes: cls, grabbable: false, pannable: true });  // a drag pans, never moves a box
        });
        var seen = {};
        var n = 0;
        this.edges.forEach(function (e) {
            var s = self.rep(e[0]);
            var t = self.rep(e[1]);
            var key = s + '\u0000' + t;
            if (s === t || seen[key]) {
                return;
            }
            seen[key] = true;
            n += 1;
            out.push({ data: { id: 'e' + n, source: s, target: t, kind: e[2] }, classes: e[2] });
        });
        return out;
    };

    // dagre orders the boxes of a rank from the order it is given them: both panes give it one order (the before
    // side's graph order, see sameOrder), so branches lie left to right alike instead of as mirror images.
    Pane.prototype.layout = function () {
        var rank = this.rank || {};
        var key = function (e) {
            return e.isNode() ? [rank[e.id()] || 0, 0] : [rank[e.source().id()] || 0, rank[e.target().id()] || 0];
        };
        this.cy.elements().layout({ name: 'dagre', rankDir: 'TB', nodeSep: 18, rankSep: 34, edgeSep: 8, fit: false,
                                    animate: false, nodeDimensionsIncludeLabels: false,
                                    sort: function (a, b) { var x = key(a), y = key(b); return x[0] - y[0] || x[1] - y[1]; }
                                  }).run();
    };

    // The order both panes hand to dagre: the before side's graph order; an after element takes its match's place
    // (its twin group, the same node, or the node it replaced), an unmatched one the place after the matched
    // element before it in its own graph order.
    function sameOrder(L, R, aff) {
        var partner = {};
        L.rank = {};
        L.order.forEach(function (id, i) {
            L.rank[id] = i;
            var d = L.data[id];
            var t = d.group ? d.twin : (R.data[id] ? id : aff[id]);
            if (t && R.data[t] && partner[t] === undefined) {
                partner[t] = i;
            }
        });
        R.rank = {};
        var last = -1;
        R.order.forEach(function (id, j) {
            if (partner[id] !== undefined) {
                last = partner[id];
                R.rank[id] = last;
            } else {
                R.rank[id] = last + 0.5 + j * 1e-6;
            }
        });
    }

    Pane.prototype.draw = function () {
        var self = this;
        if (this.cy) {
            this.cy.destroy();
        }
        this.cy = cytoscape({
            container: this.box, elements: this.elements(), style: style(),
            minZoom: 0.05, maxZoom: 3, wheelSensitivity: 0.3, boxSelectionEnabled: false
        });
        this.moved = false;
        // only what the person does moves the other pane (programmatic moves call follow themselves)
        this.cy.on('dragpan scrollzoom pinchzoom', function () {
            self.moved = true;
            link.last = self;
            follow(self);
        });
        this.cy.on('tap', 'node', function (evt) { tapped(self, evt.target); });
        this.cy.on('mouseover', 'node', function (evt) { highlight(self, evt.target.id(), false); });
        this.cy.on('mouseout', 'node', function () { unhover(); });
        // the box's size changes after the drawing started (a phone's frame grows to hold both panes): the drawing
        // follows it, so that it never paints past its box over the other pane's title or the details
        if (window.ResizeObserver && !this.box.ortlabObserved) {
            this.box.ortlabObserved = true;
            new ResizeObserver(function () { if (self.cy) { self.cy.resize(); } }).observe(this.box);
        }
    };

    // The groups whose state changes when ``id`` opens (with its closed ancestors) or closes.
    Pane.prototype.change = function (id, open) {
        var changed = [];
        if (!open) {
            if (this.opened[id]) {
                delete this.opened[id];
                changed.push(id);
            }
            return changed;
        }
        for (var x = id; x; x = this.parent[x]) {
            if (!this.opened[x]) {
                this.opened[x] = true;
                changed.push(x);
            }
        }
        return changed;
    };

    Pane.prototype.place = function (id) {  // where ``id`` (or what stands for it) is on screen
        var n = this.cy.getElementById(this.rep(id));
        return n.nonempty() ? { id: id, x: n.renderedPosition().x, top: n.renderedBoundingBox().y1 } : null;
    };

    Pane.prototype.putBack = function (place) {  // pan so that ``place`` is where it was on screen
        var n = place ? this.cy.getElementById(this.rep(place.id)) : null;
        if (n && n.nonempty()) {
            var z = this.cy.zoom();
            this.cy.pan({ x: place.x - n.position().x * z, y: place.top - n.boundingBox().y1 * z });
        }
    };

    // Open or close a group, and its twin on the other side (the same name scope), both drawn again in place:
    // the zoom stays and the group stays where it was on screen; the other pane follows when linked.
    Pane.prototype.toggle = function (id, open) {
        if (!this.data[id] || !this.data[id].group || !!this.opened[id] === open) {
            return;
        }
        var self = this;
        var o = other(this);
        var twin = this.data[id].twin;
        var here = this.place(id);
        var there = twin && o.data[twin] ? o.place(twin) : null;
        var changed = [];
        this.change(id, open).forEach(function (g) {
            var t = self.data[g].twin;
            if (t && o.data[t]) {
                changed = changed.concat(o.change(t, open));
            }
        });
        redraw(this, changed.length > 0);
        this.putBack(here);
        if (link.on) {
            follow(this);
        } else {
            o.putBack(there);
        }
        this.publish();
        o.publish();
    };

    // Draw ``pane`` again with its groups as they are now (and the other pane when ``both``), lay both out and
    // align them. The zoom stays.
    function redraw(pane, both) {
        [pane, other(pane)].forEach(function (p, i) {
            var cy = p.cy;
            var zoom = cy.zoom();
            if (i === 0 || both) {
                cy.batch(function () { cy.elements().remove(); });
                cy.add(p.elements());
            }
            p.layout();
            cy.zoom(zoom);
        });
        align();
        markFound();
    }

    // Open every group that holds ``id`` (drawn again in place when one was closed).
    Pane.prototype.reveal = function (id) {
        var p = this.parent[id];
        if (p && this.rep(id) !== id) {
            this.toggle(p, true);
        }
    };

    Pane.prototype.publish = function () {  // the drawn labels as text, for screen readers and tests
        var list = document.getElementById('labels-' + this.side);
        clear(list);
        this.cy.nodes().forEach(function (n) { list.appendChild(el('li', String(n.data('label')).replace(/\n/g, ' · '))); });
        document.body.setAttribute('data-nodes-' + this.side, String(this.cy.nodes().length));
    };

    Pane.prototype.firstView = function () {
        var cy = this.cy;
        cy.resize();
        cy.fit(undefined, 12);
        if (cy.zoom() < 0.6) {  // too small to read: start at a readable size on the first nodes of the graph
            var z = Math.max(READABLE, 0.8);
            var y0 = cy.nodes().boundingBox().y1;  // the top, with the labels of open groups
            cy.zoom(z);
            cy.pan({ x: this.startX(z, y0), y: 8 - y0 * z });
        }
        labelsIn([this], READABLE);
    };

    // A group's label is drawn above its box and may be wider than it: when the labels of what is in view reach past
    // the pane's left or right edge (a "model.22 · 140 nodes" label cut at the left), each pane is zoomed out just
    // enough for what is in view to fit across it (both panes by the same factor, about the same height, so that
    // linked panes stay lined up), then panned sideways so that the labels are whole.
    Pane.prototype.span = function () {  // [left, right] of the boxes in view with their labels, on screen
        var cy = this.cy, W = cy.width(), H = cy.height();
        var x1 = Infinity, x2 = -Infinity;
        cy.nodes().forEach(function (n) {
            if (!n.visible()) { return; }
            var box = n.renderedBoundingBox({ includeLabels: false });
            if (box.x2 < 0 || box.x1 > W || box.y2 < 0 || box.y1 > H) { return; }  // not in view
            var all = n.renderedBoundingBox({ includeLabels: true });
            x1 = Math.min(x1, all.x1);
            x2 = Math.max(x2, all.x2);
        });
        return [x1, x2];
    };

    Pane.prototype.shiftIn = function () {
        var cy = this.cy, W = cy.width(), s = this.span();
        if (!isFinite(s[0]) || s[1] - s[0] > W - 8 || (s[0] >= 0 && s[1] <= W)) { return; }
        cy.panBy({ x: s[0] < 0 ? 4 - s[0] : W - 4 - s[1], y: 0 });
    };

    function labelsIn(ps, floor) {  // ``floor``: the smallest zoom to go to (a readable one at first; a fit: none)
        for (var round = 0; round < 2; round++) {
            var f = 1;
            ps.forEach(function (p) {
                var s = p.span(), W = p.cy.width();
                if (isFinite(s[0]) && s[1] - s[0] > W - 8) {
                    f = Math.min(f, Math.max((W - 8) / (s[1] - s[0]), Math.min(1, (floor || 0) / p.cy.zoom())));
                }
            });
            if (f >= 1) { break; }
            ps.forEach(function (p) {
                var s = p.span(), cy = p.cy;
                cy.zoom({ level: Math.max(cy.minZoom(), cy.zoom() * f),
                          renderedPosition: { x: (s[0] + s[1]) / 2, y: cy.height() / 2 } });
            });
        }
        ps.forEach(function (p) { p.shiftIn(); });
    }

    // The horizontal pan at zoom ``z`` with the graph's top at ``y0``: the first screenful of nodes centred;
    // when they are wider than the pane, centred on ``centre`` (a matched element there), else from the left.
    Pane.prototype.startX = function (z, y0, centre) {
        var cy = this.cy;
        var first = cy.nodes().filter(function (n) { return !n.isParent() && n.boundingBox().y1 < y0 + cy.height() / z; });
        if (!first.length) {
            return cy.pan().x;
        }
        var bb = first.boundingBox();
        if (bb.w * z <= cy.width() - 24) {
            return cy.width() / 2 - (bb.x1 + bb.x2) / 2 * z;
        }
        if (centre && centre.nonempty() && centre.boundingBox().y1 < y0 + cy.height() / z) {
            return cy.width() / 2 - centre.position().x * z;
        }
        return 12 - bb.x1 * z;
    };

    // -- the two panes side by side: aligned layouts and a linked viewport --------------------------------------
    // After both layouts, the higher side of each matched pair is pushed down (everything from the pair's top
    // on), so that matched groups and nodes start at the same height in both panes: with one zoom and one
    // vertical pan they then sit side by side wherever the person scrolls.

    // The elements drawn on both sides that stand for the same thing, as [before node, after node]: a group and
    // its twin, a node matched across the change, a removed node and the node that replaced it.
    function pairs() {
        var L = panes.before;
        var R = panes.after;
        var aff = (shown && shown.affinity) || {};
        var out = [];
        L.cy.nodes().forEach(function (n) {
            var d = L.data[n.id()];
            // a removed node pairs with the node that replaced it, unless that node has its own twin here (a Conv
            // quantized in place: the Relu folded into it is not lined up with it a second time)
            var t = d.group ? d.twin : (R.data[d.id] ? d.id : (aff[d.id] && L.data[aff[d.id]] ? null : aff[d.id]));
            var m = t ? R.cy.getElementById(t) : null;
            if (m && m.nonempty()) {
                out.push([n, m]);
            }
        });
        return out;
    }

    function leafTops(cy) {  // the top of every drawn box that is not an open group (those follow their members)
        var tops = {};
        cy.nodes().forEach(function (n) {
            if (!n.isParent()) {
                tops[n.id()] = n.boundingBox().y1;
            }
        });
        return tops;
    }

    // An element's top, kept as its highest leaf and the distance above it (an open group's label and padding).
    function anchor(n, tops) {
        var ids = n.isParent() ? n.descendants().filter(function (x) { return !x.isParent(); }).map(function (x) { return x.id(); })
            : [n.id()];
        var a = { ids: ids, lift: 0 };
        a.lift = level(a, tops) - n.boundingBox().y1;
        return a;
    }

    function level(a, tops) {
        var y = Infinity;
        a.ids.forEach(function (x) { y = Math.min(y, tops[x]); });
        return y - a.lift;
    }

    function align() {
        var L = panes.before;
        var R = panes.after;
        link.chain = [];
        if (!L || !R || !L.cy || !R.cy) {
            return;
        }
        var start = [leafTops(L.cy), leafTops(R.cy)];
        var tops = start.map(function (t) { return Object.assign({}, t); });  // moved below; ``start`` stays
        var cand = pairs().map(function (p) {
            var a = [anchor(p[0], tops[0]), anchor(p[1], tops[1])];
            var y = [level(a[0], tops[0]), level(a[1], tops[1])];
            return { ids: [p[0].id(), p[1].id()], a: a, y: y, first: [y[0] + a[0].lift, y[1] + a[1].lift],
                     weight: p[0].data('group') ? 3 : 1 };
        });
        cand.sort(function (p, q) { return p.y[0] - q.y[0] || p.y[1] - q.y[1]; });
        // The heaviest chain of pairs in the same order on both sides (groups count more than nodes), each
        // below the one before, and below its highest member too: pushing that member down would move the group.
        var best = [];
        var prev = [];
        var end = -1;
        cand.forEach(function (c, i) {
            best[i] = c.weight;
            prev[i] = -1;
            for (var j = 0; j < i; j++) {
                if (best[j] + c.weight > best[i] && cand[j].first[0] + 2 < c.y[0] && cand[j].first[1] + 2 < c.y[1]) {
                    best[i] = best[j] + c.weight;
                    prev[i] = j;
                }
            }
            if (end < 0 || best[i] > best[end]) {
                end = i;
            }
        });
        var chain = [];
        for (var i = end; i >= 0; i = prev[i]) {
            chain.unshift(cand[i]);
        }
        chain.forEach(function (c) {  // push the higher side down from the pair's top
            var y = [level(c.a[0], tops[0]), level(c.a[1], tops[1])];
            var s = y[0] < y[1] ? 0 : 1;
            var dy = Math.abs(y[0] - y[1]);
            if (dy < 0.5) {
                return;
            }
            for (var k in tops[s]) {
                if (tops[s][k] >= y[s] - 0.5) {
                    tops[s][k] += dy;
                }
            }
        });
        [L, R].forEach(function (p, s) {
            p.cy.batch(function () {
                p.cy.nodes().forEach(function (n) {
                    var dy = n.isParent() ? 0 : tops[s][n.id()] - start[s][n.id()];
                    if (dy) {
                        n.position('y', n.position().y + dy);
                    }
                });
            });
        });
        link.chain = chain.map(function (c) { return c.ids; });
    }

    // Move the other pane to ``src``'s zoom and height: the aligned pair nearest the top of ``src`` (the
    // highest whose top is on screen) at the same screen height on both sides; its horizontal centre stays.
    function follow(src) {
        var dst = other(src);
        if (!link.on || link.busy || !dst || !dst.cy || !src.cy) {
            return;
        }
        var s = src.side === 'before' ? 0 : 1;
        var z = src.cy.zoom();
        var h = src.cy.height();
        var best = null;
        link.chain.forEach(function (ids) {
            var n = src.cy.getElementById(ids[s]);
            var m = dst.cy.getElementById(ids[1 - s]);
            if (n.empty() || m.empty()) {
                return;
            }
            var top = n.renderedBoundingBox().y1;
            var bottom = n.renderedBoundingBox().y2;
            if (bottom < 0 || top > h) {
                return;
            }
            var score = top >= 0 ? top : h - top;  // on screen first, highest first; else the least cut off
            if (!best || score < best.score) {
                best = { score: score, top: top, other: m };
            }
        });
        var pan = dst.cy.pan();
        var mx = (dst.cy.width() / 2 - pan.x) / dst.cy.zoom();
        var y = best ? best.top - best.other.boundingBox().y1 * z : src.cy.pan().y;
        link.busy = true;
        try {
            dst.cy.viewport({ zoom: z, pan: { x: dst.cy.width() / 2 - mx * z, y: y } });
        } finally {
            link.busy = false;
        }
        dst.moved = src.moved;
    }

    // The search's hits of each side (``shown.found``, sent by Python with the narrowed graph): the groups that
    // hold them open, with their twins on the other side, before the first layout. Too many hits to draw one by
    // one (a whole detector head): the groups stay as Python opened them and a closed group holding a hit is lit.
    function openFound() {
        var found = (shown && shown.found) || {};
        if ((found.before || []).length + (found.after || []).length > OPEN_HITS) {
            return;
        }
        SIDES.forEach(function (side) {
            var p = panes[side];
            var o = other(p);
            (found[side] || []).forEach(function (id) {
                var up = p.parent[id];
                if (!up || !p.data[id]) {
                    return;
                }
                p.change(up, true).forEach(function (g) {
                    var t = p.data[g].twin;
                    if (t && o.data[t]) {
                        o.change(t, true);
                    }
                });
            });
        });
    }

    // {side: the drawn boxes of the search's hits}, lit in the search colour; empty without a search.
    function markFound() {
        var found = (shown && shown.found) || {};
        var out = {};
        SIDES.forEach(function (side) {
            var p = panes[side];
            var col = p.cy.collection();
            (found[side] || []).forEach(function (id) {
                if (p.data[id]) {
                    col = col.union(p.cy.getElementById(p.rep(id)));
                }
            });
            p.cy.nodes().removeClass('found');
            col.addClass('found');
            out[side] = col;
        });
        return out;
    }

    function foundCount() {
        return SIDES.reduce(function (n, side) {
            return n + (panes[side] && panes[side].cy ? panes[side].cy.nodes('.found').length : 0);
        }, 0);
    }

    // Fit ``cols`` ({side: collection}; a side without one: its whole graph) into the panes, at most ``cap``
    // zoom. Linked: one zoom and one vertical pan for both (so matched pairs stay side by side), each pane
    // centred across on its own part; unlinked, each pane on its own.
    function fitTo(cols, cap) {
        var ps = SIDES.map(function (side) { return panes[side]; }).filter(function (p) { return p && p.cy; });
        var boxes = ps.map(function (p) {
            p.cy.resize();
            var c = cols[p.side] && cols[p.side].length ? cols[p.side] : p.cy.elements();
            return c.boundingBox();
        });
        var fit = function (p, bb, y1, y2) {
            var z = Math.min(cap, (p.cy.width() - 24) / Math.max(bb.w, 1), (p.cy.height() - 24) / Math.max(y2 - y1, 1));
            return Math.max(p.cy.minZoom(), z);
        };
        if (link.on && ps.length === 2) {
            var y1 = Math.min(boxes[0].y1, boxes[1].y1);
            var y2 = Math.max(boxes[0].y2, boxes[1].y2);
            var z = Math.min(fit(ps[0], boxes[0], y1, y2), fit(ps[1], boxes[1], y1, y2));
            ps.forEach(function (p, i) {
                p.cy.viewport({ zoom: z, pan: { x: p.cy.width() / 2 - (boxes[i].x1 + boxes[i].x2) / 2 * z,
                                                y: p.cy.height() / 2 - (y1 + y2) / 2 * z } });
            });
        } else {
            ps.forEach(function (p, i) {
                var zz = fit(p, boxes[i], boxes[i].y1, boxes[i].y2);
                p.cy.viewport({ zoom: zz, pan: { x: p.cy.width() / 2 - (boxes[i].x1 + boxes[i].x2) / 2 * zz,
                                                 y: p.cy.height() / 2 - (boxes[i].y1 + boxes[i].y2) / 2 * zz } });
            });
        }
        labelsIn(link.on ? ps : []);
        if (!link.on) { ps.forEach(function (p) { labelsIn([p]); }); }
        ps.forEach(function (p) { p.moved = false; });
    }

    // Both panes at first: one zoom for both (the whole of both when readable, else the top of both at a
    // readable size) and one vertical pan, each pane centred on its own nodes. Unlinked, each pane on its own.
    function firstViews() {
        var L = panes.before;
        var R = panes.after;
        if (!L || !R || !L.cy || !R.cy) {
            return;
        }
        L.moved = R.moved = false;
        if (foundCount()) {  // a search: every hit in view, in both panes
            fitTo({ before: L.cy.nodes('.found'), after: R.cy.nodes('.found') }, 1.2);
            return;
        }
        if (!link.on || !L.cy.nodes().length || !R.cy.nodes().length) {
            L.firstView();
            R.firstView();
            return;
        }
        var both = [L, R];
        var z = Infinity;
        var y0 = Infinity;
        var y1 = -Infinity;
        both.forEach(function (p) {
            p.cy.resize();
            var bb = p.cy.elements().boundingBox();
            z = Math.min(z, (p.cy.width() - 24) / bb.w, (p.cy.height() - 24) / bb.h);
            y0 = Math.min(y0, bb.y1);
            y1 = Math.max(y1, bb.y2);
        });
        z = Math.min(z, L.cy.maxZoom());
        if (z < 0.6) {  // too small to read: the top of both at a readable size
            z = Math.max(READABLE, 0.8);
            var top = link.chain.length ? link.chain[0] : [null, null];  // the highest matched pair
            both.forEach(function (p, i) {
                p.cy.zoom(z);
                p.cy.pan({ x: p.startX(z, y0, top[i] && p.cy.getElementById(top[i])), y: 8 - y0 * z });
            });
        } else {
            both.forEach(function (p) {
                var bb = p.cy.elements().boundingBox();
                p.cy.zoom(z);
                p.cy.pan({ x: p.cy.width() / 2 - (bb.x1 + bb.x2) / 2 * z, y: p.cy.height() / 2 - (y0 + y1) / 2 * z });
            });
        }
        labelsIn(both, READABLE);
    }

    function other(pane) {
        return panes[pane.side === 'before' ? 'after' : 'before'];
    }

    // The nodes on the other side that ``id`` (a node of ``pane``) corresponds to: the same node when it was
    // matched, the node that replaced a removed one, or the removed nodes a fused node replaced (their own ids,
    // not the groups that hold them).
    function matchIds(pane, id) {
        var o = other(pane);
        var ids = [];
        if (o.data[id] && !o.data[id].group) {
            ids.push(id);
        }
        var aff = (shown && shown.affinity) || {};
        if (pane.side === 'before' && aff[id]) {
            ids.push(aff[id]);
        }
        if (pane.side === 'after' && reverseAffinity[id]) {
            ids = ids.concat(reverseAffinity[id]);
        }
        if (pane.data[id] && pane.data[id].group && o.data[id]) {
            ids.push(id);  // a name-scope group: the same scope on the other side
        }
        var seen = {};
        return ids.filter(function (x) {
            var keep = o.data[x] && !seen[x];
            seen[x] = true;
            return keep;
        });
    }

    function nodeName(side, id) {
        var x = (shown.details || {})[id] || {};
        var d = (panes[side] && panes[side].data[id]) || {};
        if (d.group) {
            return String(d.label_closed || id).replace(/^▸ /, '').split('\n')[0];
        }
        var name = side === 'before' && x.matched ? x.matched : x.name;
        var op = side === 'before' && x.before_op_type ? x.before_op_type : x.op_type;  // the op it was, before
        return (op || '?') + ' ' + (name || id);
    }

    // Bring ``col`` into view in ``p`` at a readable zoom (no smaller than the person's own, nor than READABLE).
    function inView(p, col) {
        if (!col.length) { return; }
        var cy = p.cy;
        var bb = col.renderedBoundingBox();
        var inside = bb.x1 >= 0 && bb.y1 >= 0 && bb.x2 <= cy.width() && bb.y2 <= cy.height();
        var zoom = Math.max(cy.zoom(), READABLE);
        if (inside && cy.zoom() >= READABLE) { return; }
        cy.stop();
        cy.zoom(zoom);
        cy.center(col);
        p.moved = true;
    }

    // Both panes show the clicked node ``n`` of ``pane`` and its matches ``col`` in ``o``. Linked, the other pane
    // follows and only pans sideways to them, unless they are not on its screen at that height.
    function showPair(pane, n, o, col) {
        if (!link.on) {
            inView(o, col);
            inView(pane, n);
            return;
        }
        inView(pane, n);
        follow(pane);
        if (!col.length) {
            return;
        }
        var bb = col.renderedBoundingBox();
        if (bb.y1 < 0 || bb.y2 > o.cy.height()) {  // a match above or below the screen (a Relu folded below its Conv)
            inView(o, col);
        } else if (bb.x1 < 0 || bb.x2 > o.cy.width()) {
            o.cy.panBy({ x: o.cy.width() / 2 - (bb.x1 + bb.x2) / 2, y: 0 });
        }
    }

    var pinned = null;  // the last clicked node's matches: {side, ids}, lit again after a hover ends

    function unhover() {
        SIDES.forEach(function (side) { if (panes[side] && panes[side].cy) { panes[side].cy.nodes().removeClass('match'); } });
        if (pinned && panes[pinned.side] && panes[pinned.side].cy) {
            var cy = panes[pinned.side].cy;
            pinned.ids.forEach(function (x) { cy.getElementById(x).addClass('match'); });
        }
    }

    function highlight(pane, id, jump) {
        var o = other(pane);
        o.cy.nodes().removeClass('match');
        var ids = matchIds(pane, id);
        if (jump) {  // open the groups that hold the matches, so that exactly they light up
            ids.forEach(function (x) { o.reveal(x); });
        }
        var reps = {};
        ids.forEach(function (x) { reps[o.rep(x)] = true; });
        var col = o.cy.collection();
        Object.keys(reps).forEach(function (x) {
            var n = o.cy.getElementById(x);
            if (n.nonempty()) { col = col.union(n); }
        });
        col.addClass('match');
        if (jump) {  // both panes show the pair
            showPair(pane, pane.cy.getElementById(id), o, col);
            var status = document.getElementById('match');
            if (status) {
                var names = ids.map(function (x) { return nodeName(o.side, x); });
                var listed = names.slice(0, 6).join(', ') + (names.length > 6 ? ' and ' + (names.length - 6) + ' more' : '');
                status.textContent = ids.length ? 'Matched in the ' + o.side + ' graph (highlighted): ' + listed + '.'
                    : 'It has no match in the ' + o.side + ' graph.';
            }
            pinned = { side: o.side, ids: Object.keys(reps) };
            pane.cy.nodes().removeClass('match');
            document.body.setAttribute('data-match-count', String(col.length));
            document.body.setAttribute('data-match-ids', Object.keys(reps).join(' '));
        }
        return col.length;
    }

    function tapped(pane, n) {
        var d = n.data();
        if (d.group && !d.open) {
            pane.toggle(d.id, true);  // with its twin on the other side
            showGroup(pane, d.id);
            return;
        }
        if (d.group) {
            showGroup(pane, d.id);
            return;
        }
        showNode(pane, d);
        highlight(pane, d.id, true);
        pane.cy.nodes().unselect();
        pane.cy.getElementById(d.id).select();  // after highlight: opening its match's groups draws both again
    }

    function table() {  // two fixed columns: names (40%, at least 84 px) and values; both wrap inside their cell
        var t = el('table');
        var cols = el('colgroup');
        cols.appendChild(el('col', null, 'kc'));
        cols.appendChild(el('col', null, 'vc'));
        t.appendChild(cols);
        return t;
    }

    function row(t, key, value, sub) {
        var tr = el('tr');
        tr.appendChild(names('td', key, 'k'));
        var v = names('td', value, 'v');
        if (sub) {
            v.appendChild(names('div', sub, 'sub'));
        }
        tr.appendChild(v);
        t.appendChild(tr);
    }

    function wideRow(t, name, sub) {  // a tensor name across the whole width, its shape under it
        var tr = el('tr');
        var td = names('td', name, 'wide');
        td.colSpan = 2;
        if (sub) {
            td.appendChild(el('div', sub, 'sub'));
        }
        tr.appendChild(td);
        t.appendChild(tr);
    }

    // ``how``: 'pairs' (name, value), 'quant' (parameter, tensor, value: the value beside the parameter, the
    // tensor's name under it) or 'tensors' (tensor name, shape: one wide row each)
    function section(p, title, rows, how) {
        if (!rows || !rows.length) {
            return;
        }
        p.appendChild(el('h4', title));
        var t = table();
        rows.forEach(function (r) {
            if (how === 'quant') {
                row(t, r[0], r[2], r[1]);
            } else if (how === 'tensors') {
                wideRow(t, r[0], r[1]);
            } else {
                row(t, r[0], r.slice(1).filter(function (x) { return x; }).join('  '));
            }
        });
        p.appendChild(t);
    }

    // Open the details column (the panes give it their width) and return its emptied body.
    function panel() {
        var p = document.getElementById('details');
        clear(p);
        setDetailsOpen(true);
        return p;
    }

    function setDetailsOpen(open) {
        if (document.body.classList.contains('details-open') === open) {
            return;
        }
        document.body.classList.toggle('details-open', open);
        SIDES.forEach(function (side) {  // narrower or wider: what was in the middle of a pane stays there
            var cy = panes[side] && panes[side].cy;
            if (cy) {
                var w = cy.width();
                cy.resize();
                cy.panBy({ x: (cy.width() - w) / 2, y: 0 });
            }
        });
    }

    function showGroup(pane, id) {
        var p = panel();
        var d = pane.data[id];
        p.appendChild(el('h3', String(d.label_closed).replace(/^▸ /, '').split('\n')[0]));
        p.appendChild(el('p', d.count + ' nodes in this ' + (d.group === 'scope' ? 'name scope' : d.group === 'run' ? 'run of unchanged nodes' : 'part of the graph') + ' (' + pane.side + ')'));
        if (d.value !== undefined) {
            p.appendChild(el('p', 'worst value: ' + Number(d.value).toPrecision(4)));
        }
        var open = !!pane.opened[id];
        var b = el('button', open ? 'Close this group' : 'Open this group');
        b.addEventListener('click', function () {
            pane.toggle(id, !open);
            showGroup(pane, id);
        });
        p.appendChild(b);
    }

    function showNode(pane, d) {
        var p = panel();
        var x = (shown.details || {})[d.id] || {};
        var was = pane.side === 'before' && x.before_op_type;  // quantized or fused in place: the op it was
        var h = p.appendChild(el('h3', was ? x.before_op_type : x.op_type));
        var domain = was ? x.before_domain : x.domain;
        if (domain && domain !== 'ai.onnx') {
            h.appendChild(el('span', ' (' + domain + ')', 'domain'));
        }
        var badge = el('span', d.kind, 'kind');
        badge.style.background = color(d.kind, 0);
        p.appendChild(badge);
        p.appendChild(el('p', '', 'match')).id = 'match';
        var t = table();
        row(t, 'side', pane.side);
        row(t, 'name', pane.side === 'before' && x.matched ? x.matched : x.name);
        if (pane.side === 'before' && x.matched && x.matched !== x.name) { row(t, 'now', x.name); }
        if (pane.side === 'after' && x.matched && x.matched !== x.name) { row(t, 'was', x.matched); }
        if (pane.side === 'after' && x.before_op_type) { row(t, 'was op', x.before_op_type); }
        if (pane.side === 'before' && x.before_op_type) { row(t, 'now op', x.op_type); }
        if (x.scope) { row(t, 'scope', x.scope); }
        row(t, 'status', x.status + (x.changes && x.changes.length ? ' (' + x.changes.join(', ') + ')' : ''));
        if (d.value !== undefined) { row(t, (shown.overlay && shown.overlay.label) || 'value', Number(d.value).toPrecision(4)); }
        p.appendChild(t);
        var before = pane.side === 'before' && x.before;
        section(p, 'Quantization (scale, zero point)', was ? [] : x.quant, 'quant');
        section(p, 'Attributes', before ? x.before.attributes : x.attributes, 'pairs');
        section(p, 'Inputs', before ? x.before.inputs : x.inputs, 'tensors');
        section(p, 'Outputs', x.outputs, 'tensors');
        if (x.before && !before) {
            section(p, 'Before: attributes', x.before.attributes, 'pairs');
            section(p, 'Before: inputs', x.before.inputs, 'tensors');
        }
    }

    function header(args) {
        var head = document.getElementById('header');
        head.textContent = String(args.header || '');
        head.title = 'folded: removed nodes folded into a fused or quantized node; int8/fused: changed nodes that '
            + 'became an int8 or fused node';
        var legend = document.getElementById('legend');
        clear(legend);
        (args.legend || []).forEach(function (item) {
            var chip = el('span', null, 'chip');
            var sw = el('span', null, 'swatch');
            sw.style.borderColor = color(item.kind, 0);
            sw.style.background = color(item.kind, 1);
            chip.appendChild(sw);
            chip.appendChild(el('span', item.text));
            legend.appendChild(chip);
        });
        var ov = args.overlay;
        var toggle = document.getElementById('overlay-toggle');
        toggle.style.display = ov ? '' : 'none';
        if (ov && ov.bands) {  // an absolute scale: the verdict policy's bars, with their numbers
            var box = el('span', null, 'chip overlay-legend');
            box.id = 'overlay-legend';
            box.appendChild(el('span', String(ov.label) + ':'));
            ov.bands.forEach(function (b) {
                var sw2 = el('span', null, 'swatch');
                sw2.style.background = b.color;
                sw2.style.borderColor = b.color;
                box.appendChild(sw2);
                box.appendChild(el('span', String(b.text)));
            });
            box.appendChild(el('span', '(fill = value, border = change)', 'muted'));
            legend.appendChild(box);
        } else if (ov) {
            var chip2 = el('span', null, 'chip');
            chip2.id = 'overlay-legend';
            chip2.appendChild(el('span', String(ov.label) + ': ' + Number(ov.higher_is_worse ? ov.min : ov.max).toPrecision(3)));
            var ramp = el('span', null, 'ramp');
            ramp.style.background = 'linear-gradient(to right, ' + ov.colors.join(', ') + ')';
            chip2.appendChild(ramp);
            chip2.appendChild(el('span', Number(ov.higher_is_worse ? ov.max : ov.min).toPrecision(3) + ' (worst, red; fill = value, border = change; on ' + ov.n + ' nodes after, ' + ov.n_before + ' before)'));
            legend.appendChild(chip2);
        }
        var found = args.found || {};
        var hits = (found.before || []).length + (found.after || []).length;
        if (args.search) {
            var chip3 = el('span', null, 'chip');
            chip3.id = 'found-legend';
            var sw3 = el('span', null, 'swatch');
            sw3.style.borderColor = FOUND;
            sw3.style.background = FOUND;
            chip3.appendChild(sw3);
            chip3.appendChild(el('span', hits ? 'found “' + String(args.search) + '” (' + (found.before || []).length
                + ' before, ' + (found.after || []).length + ' after; with their neighbours)'
                : 'nothing found for “' + String(args.search) + '”'));
            legend.appendChild(chip3);
        }
        legend.appendChild(el('span', 'Click a node for its details and its match; a ▸ box opens that layer on both sides.', 'chip hint'));
        (args.titles || []).forEach(function (t, i) {
            var title = document.getElementById('title-' + SIDES[i]);
            if (title) {
                title.textContent = (i ? 'After: ' : 'Before: ') + String(t);
            }
        });
    }

    // A narrow frame (a phone) stacks the panes, each at least 320 px tall: the frame is then as tall as its
    // content needs, never shorter than the height Python asked for.
    var NARROW = 700;
    var sentHeight = null;

    function sizeFrame(height) {
        var h = height;
        if (window.innerWidth <= NARROW) {
            document.body.style.height = 'auto';
            h = Math.max(height, Math.ceil(document.body.scrollHeight));
        }
        document.body.style.height = h + 'px';
        if (h !== sentHeight) {
            sentHeight = h;
            send('streamlit:setFrameHeight', { height: h });
        }
    }

    function render(args) {
        if (typeof args.height === 'number') {
            sizeFrame(args.height);
        }
        if (shown && shown.revision === args.revision) {
            return;
        }
        shown = args;
        pinned = null;
        var details = document.getElementById('details');  // a new view: the details of the old one go
        clear(details);
        details.appendChild(el('p', HINT, 'hint'));
        setDetailsOpen(false);
        overlayOn = !!args.overlay;
        document.getElementById('overlay').checked = overlayOn;
        reverseAffinity = {};
        var aff = args.affinity || {};
        Object.keys(aff).forEach(function (b) { (reverseAffinity[aff[b]] = reverseAffinity[aff[b]] || []).push(b); });
        header(args);
        if (typeof args.height === 'number') {
            sizeFrame(args.height);  // the header and legend are drawn: their height counts on a narrow frame
        }
        drawAll(args);
    }

    function drawAll(args) {
        var box = document.getElementById('cy-after');
        if (box.clientWidth < 10 || box.clientHeight < 10) {  // the frame is not sized yet: draw when it is
            window.setTimeout(function () { if (shown === args) { drawAll(args); } }, 100);
            return;
        }
        SIDES.forEach(function (side) {
            if (panes[side] && panes[side].cy) {
                panes[side].cy.destroy();
            }
            panes[side] = new Pane(side, (args.panes || {})[side] || {});
        });
        console.debug('ortlab graph diff: laying out revision ' + args.revision);  // a hang shows in the browser log
        sameOrder(panes.before, panes.after, args.affinity || {});
        openFound();
        SIDES.forEach(function (side) { panes[side].draw(); });
        SIDES.forEach(function (side) { panes[side].layout(); });
        align();
        markFound();
        firstViews();
        console.debug('ortlab graph diff: drawn, ' + panes.before.cy.nodes().length + ' and ' + panes.after.cy.nodes().length + ' boxes');
        SIDES.forEach(function (side) { panes[side].publish(); });
        window.ortlabPanes = { before: panes.before, after: panes.after };  // for the browser test
        window.ortlabGraph = panes.after.cy;
        window.ortlabLink = link;  // the matched pairs lined up, for tests
        window.ortlabDetails = function () { return shown.details || {}; };  // each node's name and op, for tests
        window.ortlabPairs = function () { return pairs().map(function (p) { return [p[0].id(), p[1].id()]; }); };
        document.body.setAttribute('data-ortlab-graphdiff', 'ready');
        window.setTimeout(function () {
            if (panes.before.cy && !panes.before.moved && !panes.after.moved) { firstViews(); }
        }, 250);
    }

    window.addEventListener('resize', function () {
        if (shown && typeof shown.height === 'number') {
            sizeFrame(shown.height);
        }
        SIDES.forEach(function (side) { if (panes[side] && panes[side].cy) { panes[side].cy.resize(); } });
        if (panes.before && panes.before.cy && !panes.before.moved && !panes.after.moved) {
            firstViews();
        }
    });
    // Fit: the whole graph of both panes in view (an overview, however small its boxes get).
    document.getElementById('fit').addEventListener('click', function () {
        fitTo({}, 1.2);
    });
    document.getElementById('close-panel').addEventListener('click', function () { setDetailsOpen(false); });
    document.getElementById('link').addEventListener('change', function (evt) {
        link.on = !!evt.target.checked;
        var lead = link.last || panes.before;
        if (link.on && lead && lead.cy) {
            follow(lead);
        }
    });
    document.getElementById('overlay').addEventListener('change', function (evt) {
        overlayOn = !!evt.target.checked && !!(shown && shown.overlay);
        SIDES.forEach(function (side) { if (panes[side] && panes[side].cy) { panes[side].cy.style(style()); } });
    });
    window.addEventListener('message', function (event) {
        if (event.source !== window.parent || event.origin !== window.location.origin) {
            return;
        }
        var data = event.data || {};
        if (data.type === 'streamlit:render' && data.args) {
            window.ortlabRenders = (window.ortlabRenders || 0) + 1;  // each rerun of the page sends one
            render(data.args);
        }
    });
    send('streamlit:componentReady', { apiVersion: 1 });
})();
