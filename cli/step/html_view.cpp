#include "cli/step/html_view.hpp"

#include "cli/step/json_view.hpp"

#include <string>
#include <string_view>

namespace moe::step {
namespace {

// The page around the data. Everything it needs is inline; the script draws from the JSON in #trace.
constexpr std::string_view kHead = R"HTML(<!DOCTYPE html>
<html lang="en" data-status="loading"><head><meta charset="utf-8"><title>moe-oracle step</title>
<script>
// data-status on <html> is what the page reports to a headless check: "ok, …" once drawn, "error: …" on a script
// error, "overflow …" when it does not fit the window's width.
window.addEventListener('error', function (e) {
  document.documentElement.setAttribute('data-status', 'error: ' + e.message);
  var d = document.createElement('pre'); d.className = 'error'; d.textContent = 'script error: ' + e.message;
  document.body.prepend(d);
});
</script>
<style>
body { font: 13px/1.35 system-ui, sans-serif; margin: 16px 24px; color: #222; background: #fafafa; position: relative; }
h1 { font-size: 19px; margin: 0 0 4px; }
.notes p { margin: 2px 0; color: #444; }
.legend span { display: inline-block; padding: 1px 8px; margin-right: 6px; border-radius: 4px; }
.stage { margin: 26px 0 10px; padding: 8px 10px; background: #fff; border: 1px solid #ddd; border-radius: 6px; }
.stage h2 { font-size: 14px; margin: 0; }
.stage h2, .stage .why, .rank h3 { position: relative; z-index: 2; width: fit-content; background: #fff; }
.stage h2 .id { font-family: ui-monospace, monospace; color: #555; font-weight: normal; }
.stage .why { color: #555; margin: 2px 0 6px; }
.stage .shape { font-family: ui-monospace, monospace; color: #777; }
.stage.transfer { border-left: 4px solid #888; }
nav.toc { position: sticky; top: 0; z-index: 2; background: #fafafa; padding: 6px 0; border-bottom: 1px solid #ddd;
           display: flex; flex-wrap: wrap; gap: 4px 10px; font-size: 12px; }
nav.toc a { color: #335; text-decoration: none; font-family: ui-monospace, monospace; }
nav.toc a:hover { text-decoration: underline; }
nav.toc label { margin-right: 8px; font-weight: bold; }
.ranks { display: flex; gap: 120px; align-items: flex-start; }
.ranks.wide { gap: 60px; }
.rank { flex: 1 1 0; min-width: 0; }
.rank h3 { font-size: 12px; margin: 0 0 4px; color: #333; border-bottom: 1px solid #eee; }
.chip { font-family: ui-monospace, monospace; font-size: 12px; padding: 2px 6px; margin: 2px 0; border-radius: 4px;
        border-left: 5px solid; overflow-wrap: anywhere; cursor: pointer; }
.chip .p { color: #333; margin-left: 8px; } .chip .v { color: #777; margin-left: 8px; }
.chip .v.full { display: none; } .allvalues .chip .v.full { display: inline; } .allvalues .chip .v.brief { display: none; }
.focus .chip { opacity: 0.25; } .focus .chip.hl { opacity: 1; outline: 2px solid #222; }
svg.arrows text { font: 11px ui-monospace, monospace; }
.chip.empty { background: #f3f3f3; border-color: #ccc; color: #999; }
.group { font-size: 11px; color: #666; margin: 5px 0 1px; }
.counts { font-family: ui-monospace, monospace; font-size: 15px; }
.oracle { margin-top: 18px; font-weight: bold; }
svg.arrows { position: absolute; left: 0; top: 0; pointer-events: none; overflow: visible; z-index: 1; }
pre.error { color: #b00; font-weight: bold; }
</style></head><body>
<script id="trace" type="application/json">)HTML";

constexpr std::string_view kTail = R"HTML(</script>
<script>
(function () {
  var t = JSON.parse(document.getElementById('trace').textContent);
  var colours = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1', '#9c755f'];
  function colour(r) { return colours[((r % colours.length) + colours.length) % colours.length]; }
  function tint(r) { return colour(r) + '33'; }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function f3(v) { return (v >= 0 ? '+' : '') + v.toFixed(3); }
  // A row's keys: the (token, expert) pairs it carries, so that a row can be followed across stages.
  function keys(row) {
    var k = [];
    if (row.assignments.length) row.assignments.forEach(function (a) { k.push(a[0] + ':' + a[1]); });
    else row.tokens.forEach(function (tok) {
      if (row.experts.length) row.experts.forEach(function (e) { k.push(tok + ':' + e); });
      else k.push(tok + ':*');
    });
    return k;
  }
  function probText(row, backward) {
    if (!row.probs.length) return '';
    var name = backward ? 'dg' : 'p';
    if (row.probs.length === 1) return name + ' ' + row.probs[0].toFixed(3);
    var s = name;
    row.probs.forEach(function (p, i) { if (row.prob_experts[i] >= 0) s += ' e' + row.prob_experts[i] + ' ' + p.toFixed(3); });
    return s;
  }

  var body = document.body;
  document.title = 'moe-oracle step: ' + t.example + ', ' + t.dispatcher;
  function count(n, one) { return n + ' ' + one + (n === 1 ? '' : 's'); }
  body.appendChild(el('h1', '', 'moe-oracle step: ' + t.example + ', ' + t.dispatcher + ' dispatcher'));
  var notes = el('div', 'notes');
  notes.appendChild(el('p', '', 'world ' + t.layout.world + ' = ep ' + t.layout.ep + ' · etp ' + t.layout.etp + '; ' +
      t.num_experts + ' experts, top-' + t.topk + ', h ' + t.hidden + '; ' + t.tokens_per_rank + ' tokens per rank'));
  t.notes.forEach(function (n) { notes.appendChild(el('p', '', n)); });
  var legend = el('p', 'legend');
  legend.appendChild(el('span', '', 'chips are coloured by the rank their token lives on:'));
  t.rank_experts.forEach(function (ex, r) {
    var s = el('span', '', 'rank ' + r + ' (holds ' + ex.map(function (e) { return 'e' + e; }).join(' ') + ')');
    s.style.background = tint(r); s.style.borderLeft = '5px solid ' + colour(r);
    legend.appendChild(s);
  });
  notes.appendChild(legend);
  notes.appendChild(el('p', '', 'Hover over a row to follow its token through every stage; click to keep it lit.'));
  body.appendChild(notes);
  var toc = el('nav', 'toc');
  var toggle = el('label');
  // Every value of every row, or the first four of each: all by default where rows are narrow enough to read.
  var valuesBox = el('input'); valuesBox.type = 'checkbox'; valuesBox.checked = t.hidden <= 8;
  body.classList.toggle('allvalues', valuesBox.checked);
  valuesBox.addEventListener('change', function () { body.classList.toggle('allvalues', valuesBox.checked); });
  toggle.appendChild(valuesBox); toggle.appendChild(document.createTextNode(' every value'));
  toc.appendChild(toggle);
  t.stages.forEach(function (st, i) {
    var a = el('a', '', (i + 1) + ' ' + st.id); a.href = '#stage-' + (i + 1); toc.appendChild(a);
  });
  body.appendChild(toc);

  var chipsOf = [];  // per stage: [{node, keys, rank}]
  t.stages.forEach(function (st, i) {
    var sec = el('section', 'stage' + (st.transfer ? ' transfer' : ''));
    sec.id = 'stage-' + (i + 1);
    var h = el('h2', '', '[' + (i + 1) + '/' + t.stages.length + '] ');
    h.appendChild(el('span', 'id', st.id + ' — '));
    h.appendChild(document.createTextNode(st.title));
    sec.appendChild(h);
    var why = el('p', 'why', st.why + '  ');
    why.appendChild(el('span', 'shape', st.shape));
    sec.appendChild(why);
    var ranks = el('div', 'ranks');
    if (st.ranks.length > 2) ranks.classList.add('wide');  // one arrow per rank pair needs less room
    var chips = [];
    var backward = st.phase.indexOf('backward') >= 0;
    st.ranks.forEach(function (rs) {
      var col = el('div', 'rank');
      var head = 'rank ' + rs.rank;
      if (st.kind === 'rows') head += '  [' + rs.rows.length + ', ' + rs.width + ']: ' + count(rs.rows.length, 'row');
      col.appendChild(el('h3', '', head));
      if (st.kind === 'counts') col.appendChild(el('div', 'counts', '[' + rs.counts.join(', ') + ']'));
      if (st.kind === 'routing') rs.routing.forEach(function (tok) {
        var c = el('div', 'chip', tok.label + (tok.input_id >= 0 ? ' id ' + tok.input_id : '') + '  → ' +
            tok.selected.map(function (e, j) { return 'e' + e + ' (g ' + tok.weights[j].toFixed(3) + ')'; }).join(', '));
        var src = rs.rank;
        c.style.background = tint(src); c.style.borderColor = colour(src);
        col.appendChild(c);
        var tokIndex = rs.rank * t.tokens_per_rank + chips.filter(function (x) { return x.rank === rs.rank; }).length;
        chips.push({node: c, column: col, rank: rs.rank, source: src, keys: tok.selected.map(function (e) { return tokIndex + ':' + e; })});
      });
      if (st.kind === 'rows') {
        var g = 0, left = 0;
        rs.rows.forEach(function (row) {
          while (left === 0 && g < rs.groups.length) {
            col.appendChild(el('div', 'group', 'e' + rs.groups[g].expert + ': ' + count(rs.groups[g].rows, 'row')));
            left = rs.groups[g].rows; g++;
          }
          var c = el('div', 'chip' + (row.source_rank < 0 ? ' empty' : ''), row.label);
          var p = probText(row, backward);
          if (p) c.appendChild(el('span', 'p', p));
          c.appendChild(el('span', 'v full', row.values.map(f3).join(' ')));
          c.appendChild(el('span', 'v brief', row.values.slice(0, 4).map(f3).join(' ') +
              (row.values.length > 4 ? ' … (' + row.values.length + ')' : '')));
          if (row.source_rank >= 0) { c.style.background = tint(row.source_rank); c.style.borderColor = colour(row.source_rank); }
          c.title = row.label;
          col.appendChild(c);
          chips.push({node: c, column: col, rank: rs.rank, source: row.source_rank, keys: keys(row)});
          left--;
        });
        for (; g < rs.groups.length; g++) col.appendChild(el('div', 'group', 'e' + rs.groups[g].expert + ': no rows'));
        if (!rs.rows.length) col.appendChild(el('div', 'group', '(no rows)'));
      }
      ranks.appendChild(col);
    });
    sec.appendChild(ranks);
    body.appendChild(sec);
    chipsOf.push({stage: st, chips: chips});
  });
  var o = t.oracle;
  body.appendChild(el('p', 'oracle', 'oracle: max |y_step − y_oracle| = ' + o.max_abs_y.toExponential(1) +
      ', max |dL/dx_step − dL/dx_oracle| = ' + o.max_abs_grad_x.toExponential(1) + ': ' + (o.pass ? 'PASS' : 'FAIL')));

  // Following a token: every chip carrying one of the hovered chip's tokens is lit, in every stage.
  var all = [];
  chipsOf.forEach(function (s) { s.chips.forEach(function (c) { all.push(c); }); });
  function tokensOf(c) { return c.keys.map(function (k) { return k.split(':')[0]; }); }
  var pinned = null;
  function light(chip) {
    body.classList.toggle('focus', chip !== null);
    var want = chip ? tokensOf(chip) : [];
    all.forEach(function (c) {
      c.node.classList.toggle('hl', tokensOf(c).some(function (tok) { return want.indexOf(tok) >= 0; }));
    });
  }
  all.forEach(function (c) {
    c.node.addEventListener('mouseenter', function () { if (!pinned) light(c); });
    c.node.addEventListener('mouseleave', function () { if (!pinned) light(null); });
    c.node.addEventListener('click', function () { pinned = pinned === c ? null : c; light(pinned || c); });
  });

  // Arrows into every transfer stage, from the nearest earlier stage with chips, only for rows that change rank.
  // With two ranks one arrow per row; with more, one arrow per (source, destination) pair labelled with its count.
  var ns = 'http://www.w3.org/2000/svg';
  var svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'arrows');
  var defs = document.createElementNS(ns, 'defs');
  colours.forEach(function (c, i) {
    var m = document.createElementNS(ns, 'marker');
    m.setAttribute('id', 'head' + i); m.setAttribute('viewBox', '0 0 10 10'); m.setAttribute('refX', '9');
    m.setAttribute('refY', '5'); m.setAttribute('markerWidth', '7'); m.setAttribute('markerHeight', '7');
    m.setAttribute('orient', 'auto-start-reverse');
    var p = document.createElementNS(ns, 'path'); p.setAttribute('d', 'M 0 0 L 10 5 L 0 10 z'); p.setAttribute('fill', c);
    m.appendChild(p); defs.appendChild(m);
  });
  svg.appendChild(defs);
  var origin = body.getBoundingClientRect();
  function box(node) {
    var r = node.getBoundingClientRect();
    return {left: r.left - origin.left, right: r.right - origin.left, y: (r.top + r.bottom) / 2 - origin.top};
  }
  // From the foot of a column of the earlier stage to the head of a column of this one, straight down the page.
  function columnArrow(fromColumn, toColumn, rank, n) {
    var a = fromColumn.getBoundingClientRect(), b = toColumn.getBoundingClientRect();
    var x1 = (a.left + a.right) / 2 - origin.left, y1 = a.bottom - origin.top;
    var x2 = (b.left + b.right) / 2 - origin.left + (rank % 4 - 1.5) * 14, y2 = b.top - origin.top - 2;
    var path = document.createElementNS(ns, 'path');
    path.setAttribute('d', 'M ' + x1 + ' ' + y1 + ' L ' + x2 + ' ' + y2);
    path.setAttribute('stroke', colour(rank)); path.setAttribute('stroke-width', String(Math.min(1.5 + n * 0.4, 6)));
    path.setAttribute('fill', 'none'); path.setAttribute('opacity', '0.8');
    path.setAttribute('marker-end', 'url(#head' + (rank % colours.length) + ')');
    svg.appendChild(path);
    var text = document.createElementNS(ns, 'text');
    text.setAttribute('x', String(x1 + (x2 - x1) * 0.25 + 4)); text.setAttribute('y', String(y1 + (y2 - y1) * 0.25));
    text.setAttribute('fill', colour(rank));
    text.textContent = count(n, 'row');
    svg.appendChild(text);
  }
  function arrow(a, b, rank, width) {
    // Through the gap between the columns: right edge to left edge going right, the other way going left.
    var right = b.left > a.right;
    var x1 = right ? a.right : a.left, x2 = right ? b.left : b.right, bend = right ? 50 : -50;
    var path = document.createElementNS(ns, 'path');
    path.setAttribute('d', 'M ' + x1 + ' ' + a.y + ' C ' + (x1 + bend) + ' ' + a.y + ', ' + (x2 - bend) + ' ' + b.y +
        ', ' + x2 + ' ' + b.y);
    path.setAttribute('stroke', colour(rank));
    path.setAttribute('stroke-width', String(width)); path.setAttribute('fill', 'none'); path.setAttribute('opacity', '0.75');
    path.setAttribute('marker-end', 'url(#head' + (rank % colours.length) + ')');
    svg.appendChild(path);
  }
  var arrows = 0;
  chipsOf.forEach(function (cur, i) {
    if (!cur.stage.transfer) return;
    var j = i - 1;
    while (j >= 0 && !chipsOf[j].chips.length) j--;
    if (j < 0) return;
    var pairs = {};
    chipsOf[j].chips.forEach(function (from) {
      cur.chips.forEach(function (to) {
        if (to.rank === from.rank) return;  // a row that stays on its rank does not travel
        if (!from.keys.some(function (k) { return to.keys.indexOf(k) >= 0; })) return;
        var key = from.rank + '>' + to.rank;
        (pairs[key] = pairs[key] || {from: from, to: to, n: 0}).n++;
        if (cur.stage.ranks.length <= 2) { arrow(box(from.node), box(to.node), from.source, 1.6); arrows++; }
      });
    });
    if (cur.stage.ranks.length > 2) Object.keys(pairs).forEach(function (key) {
      var p = pairs[key];
      columnArrow(p.from.column, p.to.column, p.from.rank, p.n);
      arrows++;
    });
  });
  svg.setAttribute('width', String(body.clientWidth));
  svg.setAttribute('height', String(body.scrollHeight));
  body.appendChild(svg);
  var width = document.documentElement.scrollWidth;
  var fits = width <= window.innerWidth;
  document.documentElement.setAttribute('data-status', (fits ? 'ok' : 'overflow') + ', ' + count(t.stages.length, 'stage') +
      ', ' + count(arrows, 'arrow') + ', ' + width + ' px wide in a ' + window.innerWidth + ' px window');
})();
</script>
</body></html>
)HTML";

// JSON inside <script>: "</" would end the element; "<\/" is the same JSON string.
std::string script_safe(std::string json) {
  for (size_t at = json.find("</"); at != std::string::npos; at = json.find("</", at + 3)) json.insert(at + 1, "\\");
  return json;
}

}  // namespace

void write_html(const Trace& trace, const std::vector<size_t>& stages, std::optional<int> rank, std::ostream& out) {
  out << kHead << script_safe(trace_json(trace, stages, rank).dump()) << kTail;
}

}  // namespace moe::step
