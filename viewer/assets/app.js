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

  // The episode list. Served, the server filters, sorts and pages it: the
  // script only submits the form when a filter changes, leaving out the
  // empty ones. Exported, there is no server: the script filters and sorts
  // the compact index (episodes-index.js) with the server's rules and
  // draws the rows a page at a time.
  function list() {
    var form = $("#filters");
    if (!form) { return; }
    if (!form.getAttribute("data-index")) {
      form.addEventListener("submit", function () {
        $$("input, select", form).forEach(function (i) { if (i.value === "") { i.disabled = true; } });
      });
      $$("select", form).forEach(function (s) { s.addEventListener("change", function () { form.requestSubmit(); }); });
      $$("input[type=number]", form).forEach(function (s) { s.addEventListener("change", function () { form.requestSubmit(); }); });
      return;
    }
    var d = window.troupeEpisodes;
    if (!d) { return; }
    var n = d.n;
    // Undo the index's differences: each integer column as absolute values.
    ["rollout_id", "episode", "group", "scenario", "status", "end", "agents", "samples", "turns", "messages", "invalid", "roleset"].forEach(function (k) {
      if (d[k].rle) {
        var runs = d[k].rle, out = new Array(n), at = 0;
        for (var r = 0; r < runs.length; r += 2) {
          for (var j = 0; j < runs[r + 1]; j++) { out[at++] = runs[r]; }
        }
        d[k] = out;
      }
      var c = d[k], acc = 0;
      for (var i = 0; i < n; i++) { acc += c[i]; c[i] = acc; }
    });
    // A float column may be a table of its values and a position per row.
    function column(c) {
      if (Array.isArray(c)) { return c; }
      return c.at.map(function (k) { return k === null ? null : c.table[k]; });
    }
    d.team = column(d.team);
    d.alloc = d.alloc.map(column);
    var cols = [
      { key: "rollout_id", get: function (i) { return d.rollout_id[i]; } },
      { key: "episode", get: function (i) { return d.episode[i]; } },
      { key: "group", get: function (i) { return d.group[i]; } },
      { key: "scenario", str: true, get: function (i) { return d.scenarios[d.scenario[i]]; } },
      { key: "status", str: true, get: function (i) { return d.statuses[d.status[i]]; } },
      { key: "end", str: true, get: function (i) { return d.ends[d.end[i]]; } },
      { key: "team", get: function (i) { return d.team[i]; } },
      { key: "agents", get: function (i) { return d.agents[i]; } },
      { key: "samples", get: function (i) { return d.samples[i]; } },
      { key: "turns", get: function (i) { return d.turns[i]; } },
      { key: "messages", get: function (i) { return d.messages[i] < 0 ? null : d.messages[i]; } },
      { key: "invalid", get: function (i) { return d.invalid[i]; } },
      { key: "roles", str: true, get: function (i) { return d.rolesets[d.roleset[i]].map(function (k) { return d.roles[k]; }).join(" "); } }
    ];
    d.allocators.forEach(function (a, k) {
      cols.push({ key: "alloc:" + a, get: function (i) { return d.alloc[k][i]; } });
    });
    var sortCol = -1, sortDir = 1, page = 0, view = [];
    function num(id) { var v = $(id).value; return v === "" ? null : Number(v); }
    function apply() {
      var st = d.statuses.indexOf($("#f-status").value), sc = d.scenarios.indexOf($("#f-scenario").value);
      var ro = d.roles.indexOf($("#f-role").value), al = d.allocators.indexOf($("#f-alloc").value);
      var g = num("#f-group"), tmin = num("#f-team-min"), tmax = num("#f-team-max"), amin = num("#f-alloc-min"), amax = num("#f-alloc-max");
      view = [];
      for (var i = 0; i < n; i++) {
        if ($("#f-status").value !== "" && d.status[i] !== st) { continue; }
        if ($("#f-scenario").value !== "" && d.scenario[i] !== sc) { continue; }
        if ($("#f-role").value !== "" && d.rolesets[d.roleset[i]].indexOf(ro) < 0) { continue; }
        if (g !== null && d.group[i] !== g) { continue; }
        if (tmin !== null && !(d.team[i] >= tmin)) { continue; }
        if (tmax !== null && !(d.team[i] <= tmax)) { continue; }
        if ($("#f-alloc").value !== "") {
          var v = d.alloc[al][i];
          if (v === null) { continue; }
          if (amin !== null && !(v >= amin)) { continue; }
          if (amax !== null && !(v <= amax)) { continue; }
        }
        view.push(i);
      }
      if (sortCol >= 0) {
        var get = cols[sortCol].get;
        view.sort(function (a, b) {
          var x = get(a), y = get(b);
          if (x === y) { return a - b; }
          if (x === null) { return 1; }
          if (y === null) { return -1; }
          return (x < y ? -1 : 1) * sortDir;
        });
      }
      page = 0;
      draw();
    }
    var heads = $$("#episodes-head th");
    heads.forEach(function (th, i) {
      $("a", th).addEventListener("click", function (ev) {
        ev.preventDefault();
        sortDir = sortCol === i ? -sortDir : 1;
        sortCol = i;
        heads.forEach(function (h, k) {
          h.classList.toggle("sorted-asc", k === i && sortDir === 1);
          h.classList.toggle("sorted-desc", k === i && sortDir === -1);
        });
        apply();
      });
    });
    var size = 100;
    function draw() {
      var body = $("#episodes-body");
      body.textContent = "";
      var frag = document.createDocumentFragment();
      view.slice(page * size, (page + 1) * size).forEach(function (i) {
        var tr = el("tr", { "class": "episode-row", "data-ordinal": String(i), "data-rollout": String(d.rollout_id[i]) });
        cols.forEach(function (c, k) {
          var v = c.get(i);
          var td = el("td", c.str ? {} : { "class": "n" });
          if (k === 0 && (!d.linked || i < d.linked)) {
            td.appendChild(el("a", { href: "ep-" + i + ".html" }, fmt(v)));
          } else {
            td.textContent = fmt(v);
          }
          tr.appendChild(td);
        });
        frag.appendChild(tr);
      });
      body.appendChild(frag);
      var last = Math.max(0, Math.ceil(view.length / size) - 1);
      var count = $("#count");
      count.setAttribute("data-matched", String(view.length));
      count.textContent = view.length ? "episodes " + (page * size + 1) + "–" + Math.min(view.length, (page + 1) * size) + " of the " + view.length + " that match, of " + n : "no episode of the " + n + " matches";
      var pager = $("#list-pager");
      pager.textContent = "";
      if (page > 0) {
        var prev = el("a", { id: "list-prev", href: "#" }, "← previous " + size);
        prev.addEventListener("click", function (ev) { ev.preventDefault(); page--; draw(); });
        pager.appendChild(prev);
      }
      if (last > 0) { pager.appendChild(el("span", { id: "list-page" }, " page " + (page + 1) + " of " + (last + 1) + " ")); }
      if (page < last) {
        var next = el("a", { id: "list-next", href: "#" }, "next →");
        next.addEventListener("click", function (ev) { ev.preventDefault(); page++; draw(); });
        pager.appendChild(next);
      }
    }
    form.addEventListener("submit", function (ev) { ev.preventDefault(); apply(); });
    $$("select, input", form).forEach(function (i) {
      i.addEventListener("input", apply);
      i.addEventListener("change", apply);
    });
    $("#reset").addEventListener("click", function (ev) { ev.preventDefault(); form.reset(); sortCol = -1; heads.forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); }); apply(); });
    $("#jump-form").addEventListener("submit", function (ev) {
      ev.preventDefault();
      var id = Number($("#jump").value);
      var hit = d.rollout_id.indexOf(id);
      var e = $("#jump-error");
      if (hit < 0 || (d.linked && hit >= d.linked)) {
        e.textContent = hit < 0 ? "no episode has rollout_id " + $("#jump").value : "the page of rollout_id " + $("#jump").value + " was not exported (--export-max)";
        e.hidden = false;
        return;
      }
      window.location.href = "ep-" + hit + ".html";
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

  // An exported page of many agents has no server to ask for an agent:
  // ?agent=ID reads that agent's row of the credit table from the page's
  // agents file (written by the export) and shows it, or says there is no
  // such agent.
  function agentFromFile() {
    var many = $("#many");
    var src = many && many.getAttribute("data-agents");
    var id = new URLSearchParams(window.location.search).get("agent");
    if (!src || !id) { return; }
    var input = $("#agent");
    if (input) { input.value = id; }
    var s = document.createElement("script");
    s.src = src;
    s.onload = function () {
      var rows = window.troupeAgents || {};
      if (!Object.prototype.hasOwnProperty.call(rows, id)) {
        var err = $("#agent-error");
        err.textContent = "this episode has no agent " + JSON.stringify(id);
        err.hidden = false;
        return;
      }
      var body = $("#credit-table tbody");
      var sel = 'tr[data-agent="' + CSS.escape(id) + '"]';
      if (!body.querySelector(sel)) { body.insertAdjacentHTML("afterbegin", rows[id]); }
      body.querySelector(sel).classList.add("picked");
      $("#focus").textContent = id;
      $("#focus-line").hidden = false;
    };
    document.head.appendChild(s);
  }

  document.addEventListener("DOMContentLoaded", function () {
    list();
    episode();
    agentFromFile();
  });
})();
