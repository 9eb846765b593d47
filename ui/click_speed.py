"""The Generate and Compare tabs' speed as the visitor lives it, measured in the page from the
click.

The server times a generation from when its event reached it (ui/streaming.py); the visitor
waits from the click on Generate, through the page's request and the queue. `GENERATE`, a
script run once on page load, notes the moment of that click, sees the stats cards
(`streaming.stats_html`) count the first token and say that every sample finished, and then
writes the time to first token and tokens/s from the click into the cards, with the server's
figures (the cards' `data-stream`) beside them where they differ by more than 20 %, as the Chat
does (ui/chat_speed.py). A run that no click started (a link's `run=1`) keeps the server's
figures.

`COMPARE` does the same for the Compare tab: it notes the click on Compare and the moment each
column's token count in the metrics table last grew, and when the run's record arrives (the event
that shows its Download buttons ends with `RECORD_ARRIVED`, which signals it), it writes under the
table (`#compare-click-speed`) the time from the click to the first token and each column's
tokens/s from the click, with the server's figure beside where they differ by more than 20 %. It
only reads the table: text written into its cells broke Gradio's own updates of it (4 outputs over
3 metric rows). This module holds only those scripts.
"""

from __future__ import annotations

GENERATE = """() => {
  let click = null, first = null, kept = null;  // kept: {key, texts} of the last measured run
  document.addEventListener('click', (e) => {
    if (e.target.closest && e.target.closest('#generate-run')) {
      click = performance.now(); first = null;
    }
  }, true);
  const shown = (value, stream, digits, unit) => {
    const mine = value.toFixed(digits) + unit;
    const differs = stream > 0 && Math.abs(stream - value) > 0.2 * value;
    return differs ? `${mine} (server ${stream.toFixed(digits)}${unit})` : mine;
  };
  // the run a set of cards shows: its tokens and the server's figures
  const keyOf = (cells) => [0, 1, 2].map((n) => cells[n].dataset.stream || cells[n].textContent)
    .join('|');
  const update = () => {
    const cells = document.querySelectorAll('#generate-stats .stat-value');
    if (cells.length < 5) return;
    const tokens = Number(cells[0].textContent), finish = cells[4].textContent;
    if (click !== null && first === null && tokens > 0) first = performance.now();
    const done = first !== null && !finish.includes('running') && finish.trim() !== '–';
    if (click !== null && done) {
      const seconds = (performance.now() - click) / 1000;
      kept = {key: keyOf(cells), texts: [
        shown((first - click) / 1000, Number(cells[1].dataset.stream), 3, ' s'),
        shown(seconds > 0 ? tokens / seconds : 0, Number(cells[2].dataset.stream), 1, '')]};
      click = null;
    }
    // Gradio redraws the cards after the last update too: write the figures again each time
    if (kept === null || keyOf(cells) !== kept.key) return;
    [1, 2].forEach((n, j) => {
      if (cells[n].textContent === kept.texts[j]) return;
      cells[n].textContent = kept.texts[j];
      cells[n].classList.add('from-click');
      cells[n].title = 'from your click, the queue included';
    });
  };
  new MutationObserver(update).observe(document.body,
    {subtree: true, childList: true, characterData: true});
}"""

# A second run changes nothing in the page when its record arrives (the Download buttons already
# show): the event, not a change of the page, tells COMPARE to look again.
RECORD_ARRIVED = """() => {
  window.compareRecordAt = performance.now();
  document.dispatchEvent(new Event('compare-record'));
}"""
COMPARE = """() => {
  let click = null, first = null, grown = {}, before = [];  // before: the outputs at the click
  // the rows shown (Gradio's Dataframe also draws a hidden row to size its columns: not that)
  const rows = () => [...document.querySelectorAll('#compare-metrics .virtual-row')];
  const cell = (row, index) => row.querySelectorAll('.body-cell')[index];
  const text = (el) => (el ? el.textContent.trim() : '');
  const column = (name) => [...document.querySelectorAll('#compare-metrics thead th')]
    .findIndex((th) => text(th.querySelector('.header-content')) === name);
  const note = (words) => {
    const box = document.querySelector('#compare-click-speed');
    if (box && box.textContent !== words) box.textContent = words;
  };
  const outputs = () => [...document.querySelectorAll('[id^="compare-output-"] textarea')];
  document.addEventListener('click', (e) => {
    if (e.target.closest && e.target.closest('#compare-run')) {
      click = performance.now(); first = null; grown = {}; note('');
      before = outputs().map((box) => box.value);
    }
  }, true);
  // Only read the table: writing into its cells broke Gradio's own updates of it.
  const update = () => {
    const [tokensAt, speedAt] = [column('tokens'), column('tokens/s')];
    if (click === null || tokensAt < 0 || speedAt < 0) return;
    const now = performance.now();
    const changed = (box, n) => box.value.trim() && box.value !== before[n];
    if (first === null && outputs().some(changed)) first = now;
    rows().forEach((row, n) => {
      const count = Number(text(cell(row, tokensAt)));
      if (count > 0 && grown[n]?.count !== count) grown[n] = {count, at: now};
    });
    // this run's record arrived: RECORD_ARRIVED ran since the click
    if (first === null || !((window.compareRecordAt || 0) > click)) return;
    const speeds = rows().map((row, n) => {
      const server = Number(text(cell(row, speedAt)));
      const seconds = grown[n] ? (grown[n].at - click) / 1000 : 0;
      const value = seconds > 0 ? grown[n].count / seconds : 0;
      const differs = server > 0 && Math.abs(server - value) > 0.2 * value;
      return `column ${n + 1} ${value.toFixed(1)}` + (differs ? ` (server ${server})` : '');
    });
    note(`From your click, the queue included: first token after `
      + `${((first - click) / 1000).toFixed(2)} s; tokens/s ${speeds.join(', ')}.`);
    click = null;
  };
  let pending = false;  // one update a frame, however many changes Gradio makes in it
  const later = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; update(); });
  };
  new MutationObserver(later).observe(document.body,
    {subtree: true, childList: true, characterData: true});
  document.addEventListener('compare-record', later);
}"""
