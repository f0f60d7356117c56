// ortlab: the graph diff drawn with Cytoscape.js and dagre (both vendored, served by the app itself), as a
// Streamlit custom component (protocol API version 1). Python (ortlab/ui/graph_view.py) decides what is
// visible; this file lays it out, draws it and reports clicks on group boxes. Text from the model is only
// ever set with textContent or drawn as canvas labels: nothing here parses it as HTML.
(function () {
    'use strict';
    var KIND = {
        removed: ['#d62728', '#fde0e0'], fused: ['#9467bd', '#eee3f7'], quantized: ['#1f77b4', '#dcebf7'],
        added: ['#2ca02c', '#dff2df'], changed: ['#f0a000', '#fff0cc'], unchanged: ['#9e9e9e', '#f3f3f3']
    };
    var cy = null;
    var shown = null;
    var overlayOn = false;
    var nonce = 0;

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
                'line-height': 1.25, 'color': '#1e1e1e', 'border-width': 2.5,
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
                'text-wrap': 'ellipsis', 'text-max-width': 420
            } },
            { selector: 'node:selected', style: { 'border-width': 5, 'border-color': '#000' } },
            { selector: 'node.found', style: { 'underlay-color': '#ffd400', 'underlay-opacity': 0.6, 'underlay-padding': 6 } },
            { selector: 'edge', style: {
                'width': 1.6, 'line-color': '#9a9a9a', 'target-arrow-color': '#9a9a9a', 'target-arrow-shape': 'triangle',
                'curve-style': 'bezier', 'arrow-scale': 0.9
            } },
            { selector: 'edge.removed', style: { 'line-style': 'dashed', 'line-color': '#e8a0a0', 'target-arrow-color': '#e8a0a0' } },
            { selector: 'edge.fused', style: {
                'line-style': 'dotted', 'line-color': '#9467bd', 'target-arrow-shape': 'none', 'width': 2
            } }
        ];
    }

    function row(table, key, value) {
        var tr = el('tr');
        tr.appendChild(el('td', key, 'k'));
        tr.appendChild(el('td', value));
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

    function showNode(n) {
        var panel = document.getElementById('panel');
        clear(panel);
        var d = n.data();
        if (n.hasClass('open') || n.hasClass('closed')) {
            panel.appendChild(el('h3', d.label.replace(/^▸ /, '').split('\n')[0]));
            panel.appendChild(el('p', d.count + ' nodes in this ' + (d.group === 'scope' ? 'name scope' : d.group === 'run' ? 'run of unchanged nodes' : 'part of the graph')));
            if (d.value !== undefined) {
                panel.appendChild(el('p', 'worst value: ' + Number(d.value).toPrecision(4)));
            }
            var b = el('button', d.open ? 'Close this group' : 'Open this group');
            b.addEventListener('click', function () { toggle(d.id, !d.open); });
            panel.appendChild(b);
            return;
        }
        var x = d.details || {};
        panel.appendChild(el('h3', x.op_type + (x.domain && x.domain !== 'ai.onnx' ? '  (' + x.domain + ')' : '')));
        var badge = el('span', d.kind, 'kind');
        badge.style.background = color(d.kind, 0);
        panel.appendChild(badge);
        var t = el('table');
        row(t, 'name', x.name);
        if (x.scope) { row(t, 'scope', x.scope); }
        row(t, 'status', x.status + (x.changes && x.changes.length ? ' (' + x.changes.join(', ') + ')' : ''));
        if (x.matched && x.matched !== x.name) { row(t, 'was', x.matched); }
        if (d.value !== undefined) { row(t, (shown && shown.overlay && shown.overlay.label) || 'value', Number(d.value).toPrecision(4)); }
        panel.appendChild(t);
        section(panel, 'Quantization', x.quant);
        section(panel, 'Attributes', x.attributes);
        section(panel, 'Inputs', x.inputs);
        section(panel, 'Outputs', x.outputs);
        if (x.before) {
            section(panel, 'Before: attributes', x.before.attributes);
            section(panel, 'Before: inputs', x.before.inputs);
        }
    }

    function toggle(id, open) {
        nonce += 1;
        send('streamlit:setComponentValue', { value: { action: 'toggle', group: id, open: open, nonce: Date.now() + ':' + nonce }, dataType: 'json' });
    }

    function header(args) {
        document.getElementById('header').textContent = String(args.header || '');
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
        if (ov) {
            var chip2 = el('span', null, 'chip');
            chip2.appendChild(el('span', String(ov.label) + ': ' + Number(ov.higher_is_worse ? ov.min : ov.max).toPrecision(3)));
            var ramp = el('span', null, 'ramp');
            ramp.style.background = 'linear-gradient(to right, ' + ov.colors.join(', ') + ')';
            chip2.appendChild(ramp);
            chip2.appendChild(el('span', Number(ov.higher_is_worse ? ov.max : ov.min).toPrecision(3) + ' (worst, red; fill = value, border = change)'));
            legend.appendChild(chip2);
        }
    }

    function firstView() {
        cy.fit(undefined, 16);
        document.body.setAttribute('data-view', [cy.width(), cy.height(), cy.zoom().toFixed(2)].join(' '));
        if (cy.zoom() < 0.6) {  // too small to read: start at a readable size on the first nodes of the graph
            var leaves = cy.nodes().filter(function (n) { return !n.isParent(); });
            var y0 = leaves.min(function (n) { return n.boundingBox().y1; }).value;
            var z = 0.85;
            // what fits in the first screen: centred when it is narrower than the view, else from its left edge
            var first = leaves.filter(function (n) { return n.boundingBox().y1 < y0 + cy.height() / z; });
            var bb = first.boundingBox();
            cy.zoom(z);
            var x = bb.w * z <= cy.width() - 32 ? cy.width() / 2 - (bb.x1 + bb.x2) / 2 * z : 16 - bb.x1 * z;
            cy.pan({ x: x, y: 40 - y0 * z });
        }
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
        overlayOn = !!args.overlay;
        header(args);
        draw(args);
    }

    function draw(args) {
        var box = document.getElementById('cy');
        if (box.clientWidth < 10 || box.clientHeight < 10) {  // the frame is not sized yet: draw when it is
            window.setTimeout(function () { if (shown === args) { draw(args); } }, 100);
            return;
        }
        var elements = Array.isArray(args.elements) ? args.elements : [];
        if (cy) {
            cy.destroy();
        }
        cy = cytoscape({
            container: box, elements: elements, style: style(),
            minZoom: 0.05, maxZoom: 3, wheelSensitivity: 0.3, boxSelectionEnabled: false
        });
        // the links from a removed node to its replacement are drawn but do not shape the layers
        cy.elements().not('edge.fused').layout({ name: 'dagre', rankDir: 'TB', nodeSep: 18, rankSep: 34, edgeSep: 8, fit: false,
                    animate: false, nodeDimensionsIncludeLabels: false }).run();
        window.ortlabGraph = cy;  // for the browser test
        moved = false;
        firstView();
        window.setTimeout(function () { if (cy && !moved) { cy.resize(); firstView(); } }, 250);
        cy.on('scrollzoom', function () { moved = true; });
        cy.on('dragpan', function () { moved = true; });
        cy.on('tap', 'node', function (evt) {
            var n = evt.target;
            if (n.hasClass('closed')) {
                toggle(n.id(), true);
            }
            showNode(n);
        });
        var list = document.getElementById('labels');  // the drawn labels as text, for screen readers and tests
        clear(list);
        cy.nodes().forEach(function (n) { list.appendChild(el('li', String(n.data('label')).replace(/\n/g, ' · '))); });
        document.body.setAttribute('data-ortlab-graphdiff', 'ready');
        document.body.setAttribute('data-nodes', String(cy.nodes().length));
    }

    var moved = false;  // the person panned or zoomed: a resize keeps their view
    window.addEventListener('resize', function () {
        if (cy) {
            cy.resize();
            if (!moved) { firstView(); }
        }
    });
    document.getElementById('fit').addEventListener('click', function () { if (cy) { cy.fit(undefined, 16); } });
    document.getElementById('search').addEventListener('input', function (evt) {
        if (!cy) { return; }
        var q = String(evt.target.value || '').trim().toLowerCase();
        cy.nodes().removeClass('found');
        if (!q) { return; }
        var hits = cy.nodes().filter(function (n) {
            var d = n.data();
            var name = d.details ? d.details.name : '';
            return String(d.label).toLowerCase().indexOf(q) >= 0 || String(name).toLowerCase().indexOf(q) >= 0;
        });
        hits.addClass('found');
        if (hits.length) {
            cy.animate({ center: { eles: hits[0] }, zoom: Math.max(cy.zoom(), 0.9) }, { duration: 200 });
        }
    });

    window.addEventListener('message', function (event) {
        if (event.source !== window.parent || event.origin !== window.location.origin) {
            return;
        }
        var data = event.data || {};
        if (data.type === 'streamlit:render' && data.args) {
            render(data.args);
        }
    });
    send('streamlit:componentReady', { apiVersion: 1 });
})();
