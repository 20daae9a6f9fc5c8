// Draws the lag charts of the overview with uPlot from /api/lag (the
// console's own samples). Without JavaScript the tables stand alone.
(function () {
  function draw(el) {
    fetch(el.dataset.chart).then(function (r) { return r.ok ? r.json() : null; }).then(function (c) {
      if (!c || !window.uPlot || c.times.length < 1) { return; }
      var series = [{}].concat(c.labels.map(function (l, i) {
        return { label: l, stroke: "hsl(" + (i * 67 % 360) + ",60%,45%)", width: 1.5 };
      }));
      el.textContent = "";
      new uPlot({ title: "lag, last minutes", width: Math.min(el.clientWidth || 800, 900), height: 180, series: series,
        axes: [{}, { label: "records" }] }, [c.times].concat(c.data), el);
    });
  }
  function all() { document.querySelectorAll("[data-chart]").forEach(draw); }
  document.addEventListener("DOMContentLoaded", all);
  document.addEventListener("htmx:afterSwap", all);
})();
