// ortlab: the graph diff drawn with Cytoscape.js and dagre (both vendored, served by the app itself), as a
// Streamlit custom component (protocol API version 1): before and after side by side. Python
// (ortlab/ui/graph_view.py) sends each side's whole group tree and which groups are open at first; this file
// shows and hides groups itself (no round trip to Python, so the page does not rerun and the zoom stays),
// lays out, draws, and links a node to its match on the other side. It sends nothing back to Python. Text
// from the model is only ever set with textContent or drawn as canvas labels: nothing here parses it as HTML.
(function () {
    'use strict';
    var KIND = {
        removed: ['#d62728', '#fde0e0'], fused: ['#9467bd', '#eee3f7'], quantized: ['#1f77b4', '#dcebf7'],
        added: ['#2ca02c', '#dff2df'], changed: ['#f0a000', '#fff0cc'], unchanged: ['#9e9e9e', '#f3f3f3']
    };
    var SIDES = ['before', 'after'];
    var panes = {};
    var shown = null;
    var overlayOn = false;
    var READABLE = 0.55;  // the smallest zoom at which 12 px labels stay readable
    var reverseAffinity = {};

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
            { selector: 'node.found', style: { 'underlay-color': '#ffd400', 'underlay-opacity': 0.6, 'underlay-padding': 6 } },
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
            out.push({ data: d, classes: cls });
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

    Pane.prototype.layout = function () {
        this.cy.elements().layout({ name: 'dagre', rankDir: 'TB', nodeSep: 18, rankSep: 34, edgeSep: 8, fit: false,
                                    animate: false, nodeDimensionsIncludeLabels: false }).run();
    };

    Pane.prototype.draw = function () {
        var self = this;
        if (this.cy) {
            this.cy.destroy();
        }
        this.cy = cytoscape({
            container: this.box, elements: this.elements(), style: style(),
            minZoom: 0.05, maxZoom: 3, wheelSensitivity: 0.3, boxSelectionEnabled: false
        });
        this.layout();
        this.moved = false;
        this.firstView();
        this.cy.on('scrollzoom', function () { self.moved = true; });
        this.cy.on('dragpan', function () { self.moved = true; });
        this.cy.on('tap', 'node', function (evt) { tapped(self, evt.target); });
        this.cy.on('mouseover', 'node', function (evt) { highlight(self, evt.target.id(), false); });
        this.cy.on('mouseout', 'node', function () { unhover(); });
        this.publish();
    };

    // Open or close a group, drawn again in place: the zoom stays, and the group stays where it was on screen.
    Pane.prototype.toggle = function (id, open) {
        if (!this.data[id] || !this.data[id].group || !!this.opened[id] === open) {
            return;
        }
        var cy = this.cy;
        var anchor = cy.getElementById(this.rep(id));
        var before = anchor.nonempty() ? anchor.renderedPosition() : null;
        var top = anchor.nonempty() ? anchor.renderedBoundingBox().y1 : null;
        if (open) {
            var x = id;
            while (x) {
                this.opened[x] = true;
                x = this.parent[x];
            }
        } else {
            delete this.opened[id];
        }
        var zoom = cy.zoom();
        cy.batch(function () {
            cy.elements().remove();
        });
        cy.add(this.elements());
        this.layout();
        cy.zoom(zoom);
        var now = cy.getElementById(this.rep(id));
        if (before && now.nonempty()) {  // keep the group's top edge and centre where they were on screen
            var p = now.position();
            var bb = now.boundingBox();
            cy.pan({ x: before.x - p.x * zoom, y: top - bb.y1 * zoom });
        }
        this.publish();
    };

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
            var leaves = cy.nodes().filter(function (n) { return !n.isParent(); });
            if (!leaves.length) {
                return;
            }
            var y0 = cy.nodes().boundingBox().y1;  // the top, with the labels of open groups
            var z = Math.max(READABLE, 0.8);
            var first = leaves.filter(function (n) { return n.boundingBox().y1 < y0 + cy.height() / z; });
            var bb = first.boundingBox();
            cy.zoom(z);
            var x = bb.w * z <= cy.width() - 24 ? cy.width() / 2 - (bb.x1 + bb.x2) / 2 * z : 12 - bb.x1 * z;
            cy.pan({ x: x, y: 8 - y0 * z });
        }
    };

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

    function matchesOf(pane, id) {  // what stands for the matches on screen (a closed group, or the node itself)
        var o = other(pane);
        var reps = {};
        matchIds(pane, id).forEach(function (x) { reps[o.rep(x)] = true; });
        return Object.keys(reps);
    }

    function nodeName(side, id) {
        var x = (shown.details || {})[id] || {};
        var d = (panes[side] && panes[side].data[id]) || {};
        if (d.group) {
            return String(d.label_closed || id).replace(/^▸ /, '').split('\n')[0];
        }
        var name = side === 'before' && x.matched ? x.matched : x.name;
        return (x.op_type || '?') + ' ' + (name || id);
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
            inView(o, col);
            inView(pane, pane.cy.getElementById(id));
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
            pane.toggle(d.id, true);
            var o = other(pane);
            if (o.data[d.id]) {
                o.toggle(d.id, true);  // the same name scope opens on both sides
            }
            showGroup(pane, d.id);
            return;
        }
        if (d.group) {
            showGroup(pane, d.id);
            return;
        }
        pane.cy.nodes().unselect();
        n.select();
        showNode(pane, d);
        highlight(pane, d.id, true);
    }

    function row(table, key, value) {
        var tr = el('tr');
        tr.appendChild(el('td', key, 'k'));
        tr.appendChild(el('td', value, 'v'));
        table.appendChild(tr);
    }

    function section(panel, title, rows) {
        if (!rows || !rows.length) {
            return;
        }
        panel.appendChild(el('h4', title));
        var t = el('table');
        rows.forEach(function (r) { row(t, r[0], r.slice(1).filter(function (x) { return x; }).join('  ')); });
        panel.appendChild(t);
    }

    function panel() {
        var p = document.getElementById('panel');
        clear(p);
        return p;
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
            if (other(pane).data[id]) {
                other(pane).toggle(id, !open);
            }
            showGroup(pane, id);
        });
        p.appendChild(b);
    }

    function showNode(pane, d) {
        var p = panel();
        var x = (shown.details || {})[d.id] || {};
        p.appendChild(el('h3', x.op_type + (x.domain && x.domain !== 'ai.onnx' ? '  (' + x.domain + ')' : '')));
        var badge = el('span', d.kind, 'kind');
        badge.style.background = color(d.kind, 0);
        p.appendChild(badge);
        p.appendChild(el('p', '', 'match')).id = 'match';
        var t = el('table');
        row(t, 'side', pane.side);
        row(t, 'name', pane.side === 'before' && x.matched ? x.matched : x.name);
        if (pane.side === 'before' && x.matched && x.matched !== x.name) { row(t, 'now', x.name); }
        if (pane.side === 'after' && x.matched && x.matched !== x.name) { row(t, 'was', x.matched); }
        if (x.scope) { row(t, 'scope', x.scope); }
        row(t, 'status', x.status + (x.changes && x.changes.length ? ' (' + x.changes.join(', ') + ')' : ''));
        if (d.value !== undefined) { row(t, (shown.overlay && shown.overlay.label) || 'value', Number(d.value).toPrecision(4)); }
        p.appendChild(t);
        var before = pane.side === 'before' && x.before;
        section(p, 'Quantization (scale, zero point)', x.quant);
        section(p, 'Attributes', before ? x.before.attributes : x.attributes);
        section(p, 'Inputs', before ? x.before.inputs : x.inputs);
        section(p, 'Outputs', x.outputs);
        if (x.before && !before) {
            section(p, 'Before: attributes', x.before.attributes);
            section(p, 'Before: inputs', x.before.inputs);
        }
    }

    function header(args) {
        document.getElementById('header').textContent = String(args.header || '');
        document.getElementById('header').title = String(args.header || '');  // whole, when the bar cuts it
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
        (args.titles || []).forEach(function (t, i) {
            var title = document.getElementById('title-' + SIDES[i]);
            if (title) {
                title.textContent = (i ? 'After: ' : 'Before: ') + String(t);
                title.title = title.textContent;  // the full title when the pane cuts it
            }
        });
    }

    function render(args) {
        if (typeof args.height === 'number') {
            document.body.style.height = args.height + 'px';
            send('streamlit:setFrameHeight', { height: args.height });
        }
        if (shown && shown.revision === args.revision) {
            return;
        }
        shown = args;
        pinned = null;
        overlayOn = !!args.overlay;
        document.getElementById('overlay').checked = overlayOn;
        reverseAffinity = {};
        var aff = args.affinity || {};
        Object.keys(aff).forEach(function (b) { (reverseAffinity[aff[b]] = reverseAffinity[aff[b]] || []).push(b); });
        header(args);
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
        SIDES.forEach(function (side) { panes[side].draw(); });
        window.ortlabPanes = { before: panes.before, after: panes.after };  // for the browser test
        window.ortlabGraph = panes.after.cy;
        document.body.setAttribute('data-ortlab-graphdiff', 'ready');
        window.setTimeout(function () {
            SIDES.forEach(function (side) { if (panes[side].cy && !panes[side].moved) { panes[side].firstView(); } });
        }, 250);
    }

    window.addEventListener('resize', function () {
        SIDES.forEach(function (side) {
            var p = panes[side];
            if (p && p.cy) {
                p.cy.resize();
                if (!p.moved) { p.firstView(); }
            }
        });
    });
    document.getElementById('fit').addEventListener('click', function () {
        SIDES.forEach(function (side) {
            var p = panes[side];
            if (p && p.cy) {
                p.cy.fit(undefined, 12);
                if (p.cy.zoom() < READABLE) {  // the whole graph would be unreadable: the top at a readable size
                    p.moved = false;
                    p.firstView();
                }
            }
        });
    });
    document.getElementById('overlay').addEventListener('change', function (evt) {
        overlayOn = !!evt.target.checked && !!(shown && shown.overlay);
        SIDES.forEach(function (side) { if (panes[side] && panes[side].cy) { panes[side].cy.style(style()); } });
    });
    document.getElementById('search').addEventListener('input', function (evt) {
        var q = String(evt.target.value || '').trim().toLowerCase();
        SIDES.forEach(function (side) {
            var p = panes[side];
            if (!p || !p.cy) { return; }
            p.cy.nodes().removeClass('found');
            if (!q) { return; }
            var reps = {};
            p.order.forEach(function (id) {
                var d = p.data[id];
                if (d.group) { return; }
                var x = (shown.details || {})[id] || {};
                var name = side === 'before' && x.matched ? x.matched : x.name;
                if (String(d.label).toLowerCase().indexOf(q) >= 0 || String(name || '').toLowerCase().indexOf(q) >= 0) {
                    reps[p.rep(id)] = true;
                }
            });
            var hits = p.cy.collection();
            Object.keys(reps).forEach(function (id) { hits = hits.union(p.cy.getElementById(id)); });
            hits.addClass('found');
            if (hits.length) {
                p.cy.animate({ center: { eles: hits[0] }, zoom: Math.max(p.cy.zoom(), 0.8) }, { duration: 200 });
            }
        });
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
