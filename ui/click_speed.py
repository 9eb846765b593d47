"""The Generate tab's speed as the visitor lives it, measured in the page from the click.

The server times a generation from when its event reached it (ui/streaming.py); the visitor
waits from the click on Generate, through the page's request and the queue. `GENERATE`, a
script run once on page load, notes the moment of that click, sees the stats cards
(`streaming.stats_html`) count the first token and say that every sample finished, and then
writes the time to first token and tokens/s from the click into the cards, with the server's
figures (the cards' `data-stream`) beside them where they differ by more than 20 %, as the Chat
does (ui/chat_speed.py). A run that no click started (a link's `run=1`) keeps the server's
figures. This module holds only that script.
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
