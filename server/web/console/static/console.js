// tikk console: asks before an action, and keeps the overview live. The pages work without it.
"use strict";

document.addEventListener("submit", (event) => {
  const form = event.target;
  let question = form.dataset.confirm;
  const counted = event.submitter && event.submitter.dataset.confirmCount;
  if (counted) {
    const picked = document.querySelectorAll(`input[form="${form.id}"]:checked`).length;
    if (picked === 0) {
      window.alert("Select at least one first.");
      event.preventDefault();
      return;
    }
    question = counted.replace("{n}", String(picked));
  }
  if (question && !window.confirm(question)) event.preventDefault();
});

function cell(html) {
  const td = document.createElement("td");
  td.innerHTML = html; // cells come escaped from the server (pages.queue_row)
  return td;
}

function drawChart(svg, points) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const ns = "http://www.w3.org/2000/svg";
  const values = points.flatMap((p) => [p.p50, p.p99]).filter((v) => v !== null);
  const note = document.createElementNS(ns, "text");
  note.setAttribute("x", "8"); note.setAttribute("y", "14");
  if (values.length === 0) {
    note.textContent = "no run recorded yet";
    svg.appendChild(note);
    return;
  }
  const top = Math.max(...values, 1);
  note.textContent = `max ${Math.round(top)} ms`;
  svg.appendChild(note);
  const first = points[0].at, span = Math.max(points[points.length - 1].at - first, 1);
  for (const key of ["p50", "p99"]) {
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("class", key);
    line.setAttribute("points", points.filter((p) => p[key] !== null).map((p) =>
      `${(20 + 570 * (p.at - first) / span).toFixed(1)},${(150 - 130 * p[key] / top).toFixed(1)}`
    ).join(" "));
    svg.appendChild(line);
    for (const p of points.filter((q) => q[key] !== null)) {
      const dot = document.createElementNS(ns, "circle");
      dot.setAttribute("class", key);
      dot.setAttribute("r", "2.5");
      dot.setAttribute("cx", (20 + 570 * (p.at - first) / span).toFixed(1));
      dot.setAttribute("cy", (150 - 130 * p[key] / top).toFixed(1));
      svg.appendChild(dot);
    }
  }
}

async function refresh(section) {
  const answer = await fetch(section.dataset.live, { credentials: "same-origin" });
  if (!answer.ok) return;
  const data = await answer.json();
  const body = section.querySelector("tbody");
  if (body) {
    body.replaceChildren(...data.rows.map((row) => {
      const tr = document.createElement("tr");
      row.forEach((html) => tr.appendChild(cell(html)));
      return tr;
    }));
  }
  const svg = document.getElementById("lateness-chart");
  if (svg) drawChart(svg, data.chart);
}

// A page's live part (pages.live) is read again and swapped in place; not while the tab is
// hidden, and never the rest of the page, so nothing a person typed is lost.
async function swap(part) {
  if (document.hidden) return;
  const answer = await fetch(window.location.href, { credentials: "same-origin" });
  if (!answer.ok) return;
  const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
  const replacement = fresh.getElementById(part.id);
  if (replacement) part.replaceChildren(...replacement.childNodes);
}

document.addEventListener("DOMContentLoaded", () => {
  const live = document.querySelector("[data-live]");
  if (live) {
    refresh(live);
    window.setInterval(() => refresh(live), 5000);
  }
  const part = document.querySelector("[data-refresh]");
  if (part) window.setInterval(() => swap(part), Number(part.dataset.refresh) * 1000);
});
