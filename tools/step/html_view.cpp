#include "tools/step/html_view.hpp"

#include "tools/step/json_view.hpp"

#include <string>
#include <string_view>

namespace moe::step {
namespace {

// The page around the data. Everything it needs is inline; the script draws from the JSON in #trace.
constexpr std::string_view kHead = R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>moe-step: loading</title>
<script>
window.addEventListener('error', function (e) {
  document.title = 'moe-step: error: ' + e.message;
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
.stage h2 .id { font-family: ui-monospace, monospace; color: #555; font-weight: normal; }
.stage .why { color: #555; margin: 2px 0 6px; }
.stage .shape { font-family: ui-monospace, monospace; color: #777; }
.stage.transfer { border-left: 4px solid #888; }
.ranks { display: flex; gap: 150px; align-items: flex-start; padding-left: 46px; }
.rank { flex: 0 1 430px; min-width: 0; }
.rank h3 { font-size: 12px; margin: 0 0 4px; color: #333; border-bottom: 1px solid #eee; }
.chip { font-family: ui-monospace, monospace; font-size: 12px; padding: 2px 6px; margin: 2px 0; border-radius: 4px;
        border-left: 5px solid; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.chip .p { color: #333; margin-left: 8px; } .chip .v { color: #777; margin-left: 8px; }
.chip.empty { background: #f3f3f3; border-color: #ccc; color: #999; }
.group { font-size: 11px; color: #666; margin: 5px 0 1px; }
.counts { font-family: ui-monospace, monospace; font-size: 15px; }
.oracle { margin-top: 18px; font-weight: bold; }
svg.arrows { position: absolute; left: 0; top: 0; pointer-events: none; overflow: visible; }
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
  body.appendChild(notes);

  var chipsOf = [];  // per stage: [{node, keys, rank}]
  t.stages.forEach(function (st, i) {
    var sec = el('section', 'stage' + (st.transfer ? ' transfer' : ''));
    var h = el('h2', '', '[' + (i + 1) + '/' + t.stages.length + '] ');
    h.appendChild(el('span', 'id', st.id + ' — '));
    h.appendChild(document.createTextNode(st.title));
    sec.appendChild(h);
    var why = el('p', 'why', st.why + '  ');
    why.appendChild(el('span', 'shape', st.shape));
    sec.appendChild(why);
    var ranks = el('div', 'ranks');
    if (st.ranks.length > 2) ranks.style.gap = '70px';  // the arrows need less room than four columns of chips
    var chips = [];
    var backward = st.phase.indexOf('backward') >= 0;
    st.ranks.forEach(function (rs) {
      var col = el('div', 'rank');
      var head = 'rank ' + rs.rank;
      if (st.kind === 'rows') head += '  [' + rs.rows.length + ', ' + rs.width + ']';
      col.appendChild(el('h3', '', head));
      if (st.kind === 'counts') col.appendChild(el('div', 'counts', '[' + rs.counts.join(', ') + ']'));
      if (st.kind === 'routing') rs.routing.forEach(function (tok) {
        var c = el('div', 'chip', tok.label + (tok.input_id >= 0 ? ' id ' + tok.input_id : '') + '  → ' +
            tok.selected.map(function (e, j) { return 'e' + e + ' (g ' + tok.weights[j].toFixed(3) + ')'; }).join(', '));
        var src = rs.rank;
        c.style.background = tint(src); c.style.borderColor = colour(src);
        col.appendChild(c);
        var tokIndex = rs.rank * t.tokens_per_rank + chips.filter(function (x) { return x.rank === rs.rank; }).length;
        chips.push({node: c, rank: rs.rank, source: src, keys: tok.selected.map(function (e) { return tokIndex + ':' + e; })});
      });
      if (st.kind === 'rows') {
        var g = 0, left = 0;
        rs.rows.forEach(function (row) {
          while (left === 0 && g < rs.groups.length) {
            col.appendChild(el('div', 'group', 'e' + rs.groups[g].expert + ': ' + rs.groups[g].rows + ' rows'));
            left = rs.groups[g].rows; g++;
          }
          var c = el('div', 'chip' + (row.source_rank < 0 ? ' empty' : ''), row.label);
          var p = probText(row, backward);
          if (p) c.appendChild(el('span', 'p', p));
          c.appendChild(el('span', 'v', row.values.slice(0, 3).map(f3).join(' ') + (row.values.length > 3 ? ' …' : '')));
          if (row.source_rank >= 0) { c.style.background = tint(row.source_rank); c.style.borderColor = colour(row.source_rank); }
          c.title = row.label;
          col.appendChild(c);
          chips.push({node: c, rank: rs.rank, source: row.source_rank, keys: keys(row)});
          left--;
        });
        for (; g < rs.groups.length; g++) col.appendChild(el('div', 'group', 'e' + rs.groups[g].expert + ': 0 rows'));
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

  // Arrows: into every transfer stage, from the nearest earlier stage that has chips, wherever a pair matches.
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
  var arrows = 0;
  chipsOf.forEach(function (cur, i) {
    if (!cur.stage.transfer) return;
    var j = i - 1;
    while (j >= 0 && !chipsOf[j].chips.length) j--;
    if (j < 0) return;
    chipsOf[j].chips.forEach(function (from) {
      cur.chips.forEach(function (to) {
        if (!from.keys.some(function (k) { return to.keys.indexOf(k) >= 0; })) return;
        // Through the gaps between the columns: right edge to left edge going right, the other way going left,
        // and a loop in the left margin for a row that stays on its rank.
        var a = from.node.getBoundingClientRect(), b = to.node.getBoundingClientRect();
        var y1 = (a.top + a.bottom) / 2 - origin.top, y2 = (b.top + b.bottom) / 2 - origin.top;
        var x1, x2, c1, c2;
        if (to.rank > from.rank) { x1 = a.right; x2 = b.left; c1 = x1 + 90; c2 = x2 - 90; }
        else if (to.rank < from.rank) { x1 = a.left; x2 = b.right; c1 = x1 - 90; c2 = x2 + 90; }
        else { x1 = a.left; x2 = b.left; c1 = x1 - 40; c2 = x2 - 40; }
        x1 -= origin.left; x2 -= origin.left; c1 -= origin.left; c2 -= origin.left;
        var path = document.createElementNS(ns, 'path');
        path.setAttribute('d', 'M ' + x1 + ' ' + y1 + ' C ' + c1 + ' ' + y1 + ', ' + c2 + ' ' + y2 + ', ' + x2 + ' ' + y2);
        path.setAttribute('stroke', colour(from.source));
        path.setAttribute('stroke-width', '1.6'); path.setAttribute('fill', 'none'); path.setAttribute('opacity', '0.75');
        path.setAttribute('marker-end', 'url(#head' + (from.source % colours.length) + ')');
        svg.appendChild(path);
        arrows++;
      });
    });
  });
  svg.setAttribute('width', String(body.scrollWidth + 40));
  svg.setAttribute('height', String(body.scrollHeight + 40));
  body.appendChild(svg);
  document.title = 'moe-step: ok, ' + t.stages.length + ' stages, ' + arrows + ' arrows';
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
