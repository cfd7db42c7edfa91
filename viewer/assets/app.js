// troupe view: the few things the server-drawn pages need a script for.
// No framework, no network: everything is in the page or in this file.
"use strict";

(function () {
  function $(sel, root) { return (root || document).querySelector(sel); }
  function $$(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) { e.setAttribute(k, attrs[k]); }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) { return "–"; }
    if (typeof v !== "number") { return String(v); }
    if (Number.isInteger(v)) { return String(v); }
    return String(Number(v.toPrecision(6)));
  }

  // The episode list: filters, sorting and jumps over the rows of the
  // page's JSON block.
  function list() {
    var block = $("#episodes-data");
    if (!block) { return; }
    var d = JSON.parse(block.textContent);
    var rows = d.rows;
    var C = {}; d.columns.forEach(function (c, i) { C[c] = i; });
    function fill(id, names) {
      var s = $(id);
      names.forEach(function (n, i) { s.appendChild(el("option", { value: String(i) }, n)); });
    }
    fill("#f-status", d.statuses); fill("#f-scenario", d.scenarios); fill("#f-role", d.roles); fill("#f-alloc", d.allocators);

    var cols = [
      { name: "rollout_id", get: function (r) { return r[C.rollout_id]; } },
      { name: "episode", get: function (r) { return r[C.index]; } },
      { name: "group", get: function (r) { return r[C.group]; } },
      { name: "scenario", get: function (r) { return d.scenarios[r[C.scenario]]; } },
      { name: "status", get: function (r) { return d.statuses[r[C.status]]; } },
      { name: "end", get: function (r) { return d.ends[r[C.end]]; } },
      { name: "team reward", get: function (r) { return r[C.team]; } },
      { name: "agents", get: function (r) { return r[C.agents]; } },
      { name: "samples", get: function (r) { return r[C.samples]; } },
      { name: "turns", get: function (r) { return r[C.turns]; } },
      { name: "messages", get: function (r) { return r[C.messages] < 0 ? null : r[C.messages]; } },
      { name: "invalid", get: function (r) { return r[C.invalid]; } },
      { name: "roles", get: function (r) { return r[C.roles].map(function (k) { return d.roles[k]; }).join(" "); } }
    ];
    d.allocators.forEach(function (a, k) {
      cols.push({ name: a, alloc: true, get: function (r) { return r[C.alloc][k]; } });
    });
    var head = $("#episodes-head");
    cols.forEach(function (c, i) {
      var th = el("th", { "data-col": String(i) }, c.name);
      th.addEventListener("click", function () { sortBy(i); });
      head.appendChild(th);
    });
    var sortCol = -1, sortDir = 1, shown = 100, view = rows;
    function num(id) { var v = $(id).value; return v === "" ? null : Number(v); }
    function apply() {
      var st = $("#f-status").value, sc = $("#f-scenario").value, ro = $("#f-role").value, al = $("#f-alloc").value;
      var g = num("#f-group"), tmin = num("#f-team-min"), tmax = num("#f-team-max"), amin = num("#f-alloc-min"), amax = num("#f-alloc-max");
      view = rows.filter(function (r) {
        if (st !== "" && r[C.status] !== Number(st)) { return false; }
        if (sc !== "" && r[C.scenario] !== Number(sc)) { return false; }
        if (ro !== "" && r[C.roles].indexOf(Number(ro)) < 0) { return false; }
        if (g !== null && r[C.group] !== g) { return false; }
        if (tmin !== null && !(r[C.team] >= tmin)) { return false; }
        if (tmax !== null && !(r[C.team] <= tmax)) { return false; }
        if (al !== "") {
          var v = r[C.alloc][Number(al)];
          if (v === null) { return false; }
          if (amin !== null && !(v >= amin)) { return false; }
          if (amax !== null && !(v <= amax)) { return false; }
        }
        return true;
      });
      if (sortCol >= 0) {
        var get = cols[sortCol].get;
        view = view.slice().sort(function (a, b) {
          var x = get(a), y = get(b);
          if (x === y) { return a[C.ordinal] - b[C.ordinal]; }
          if (x === null) { return 1; }
          if (y === null) { return -1; }
          return (x < y ? -1 : 1) * sortDir;
        });
      }
      shown = 100;
      draw();
    }
    function sortBy(i) {
      sortDir = sortCol === i ? -sortDir : 1;
      sortCol = i;
      $$("#episodes-head th").forEach(function (th, k) {
        th.classList.toggle("sorted-asc", k === i && sortDir === 1);
        th.classList.toggle("sorted-desc", k === i && sortDir === -1);
      });
      apply();
    }
    function draw() {
      var body = $("#episodes-body");
      body.textContent = "";
      var frag = document.createDocumentFragment();
      view.slice(0, shown).forEach(function (r) {
        var tr = el("tr", { "class": "episode-row", "data-ordinal": String(r[C.ordinal]), "data-rollout": String(r[C.rollout_id]) });
        cols.forEach(function (c, i) {
          var v = c.get(r);
          var td = el("td", typeof v === "number" || v === null ? { "class": "n" } : {});
          if (i === 0 && (!d.linked || r[C.ordinal] < d.linked)) {
            td.appendChild(el("a", { href: "ep-" + r[C.ordinal] + ".html" }, fmt(v)));
          } else {
            td.textContent = fmt(v);
          }
          tr.appendChild(td);
        });
        frag.appendChild(tr);
      });
      body.appendChild(frag);
      $("#count").textContent = view.length + " of " + rows.length + " episodes" + (view.length > shown ? ", the first " + shown + " shown" : "");
      $("#more").hidden = view.length <= shown;
    }
    $("#more").addEventListener("click", function () { shown += 500; draw(); });
    $$("#filters select, #filters input:not(#jump)").forEach(function (i) {
      i.addEventListener("input", apply);
      i.addEventListener("change", apply);
    });
    $("#filters").addEventListener("submit", function (ev) {
      ev.preventDefault();
      var id = Number($("#jump").value);
      var hit = rows.filter(function (r) { return r[C.rollout_id] === id; });
      var e = $("#jump-error");
      if (hit.length === 0 || (d.linked && hit[0][C.ordinal] >= d.linked)) {
        e.textContent = hit.length === 0 ? "no episode has rollout_id " + $("#jump").value : "the page of rollout_id " + $("#jump").value + " was not exported (--export-max)";
        e.hidden = false;
        return;
      }
      window.location.href = "ep-" + hit[0][C.ordinal] + ".html";
    });
    apply();
  }

  // The episode page: pick an agent on a timeline to see the states it
  // was in and the transitions it took on its role's diagram; hover a
  // lifeline's name to see the messages it sent or received.
  function episode() {
    $$(".role").forEach(function (role) {
      var nodes = $$(".state-node", role);
      var edges = $$("path.edge.taken", role);
      $$(".agent-row", role).forEach(function (row) {
        row.addEventListener("click", function () {
          var seat = row.getAttribute("data-seat");
          var picked = !row.classList.contains("picked");
          $$(".agent-row", role).forEach(function (r) { r.classList.remove("picked"); });
          row.classList.toggle("picked", picked);
          nodes.forEach(function (n) {
            var by = (n.getAttribute("data-visited-by") || "").split(" ");
            var on = picked && by.indexOf(seat) >= 0;
            n.classList.toggle("picked", on);
            n.classList.toggle("unpicked", picked && !on);
          });
          edges.forEach(function (e) {
            var on = picked && (e.getAttribute("data-taken-by") || "").split(" ").indexOf(seat) >= 0;
            e.classList.toggle("picked", on);
            e.classList.toggle("unpicked", picked && !on);
          });
        });
      });
    });
    $$("#sequence .lane").forEach(function (lane) {
      var seat = lane.getAttribute("data-seat");
      var name = $(".lane-label", lane).textContent;
      lane.addEventListener("mouseenter", function () {
        $$("#sequence .msg").forEach(function (m) {
          var rs = (m.getAttribute("data-recipients") || "").split(" ");
          var mine = m.getAttribute("data-from") === name || rs.indexOf(seat) >= 0;
          m.classList.toggle("dim", !mine);
        });
      });
      lane.addEventListener("mouseleave", function () {
        $$("#sequence .msg").forEach(function (m) { m.classList.remove("dim"); });
      });
    });
    var open = $("#expand-all"), close = $("#collapse-all");
    if (open) { open.addEventListener("click", function () { $$("details.turn").forEach(function (d) { d.open = true; }); }); }
    if (close) { close.addEventListener("click", function () { $$("details.turn").forEach(function (d) { d.open = false; }); }); }
    function openTarget() {
      var id = decodeURIComponent(window.location.hash.slice(1));
      var t = id && document.getElementById(id);
      if (t && t.tagName === "DETAILS") { t.open = true; }
    }
    window.addEventListener("hashchange", openTarget);
    openTarget();
  }

  document.addEventListener("DOMContentLoaded", function () {
    list();
    episode();
  });
})();
