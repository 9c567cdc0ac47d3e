/* The console's own script, loaded (not deferred) right after the header.

   1. Folds the header's links behind its Menu button on a narrow screen, before they are drawn;
      without this script they wrap under the brand and stay usable.
   2. Tells a screen reader which alarms were raised or cleared: the strip under the header
      redraws itself every few seconds, so it is not a live region itself (it would be read out
      at every redraw); #alarm-news is, and gets a sentence only when the set of alarms changes.
   3. Makes a table box that scrolls sideways (a wide table on a phone) reachable from the
      keyboard: a tab stop, named after the heading above it; one that fits is left alone. */
(function () {
  "use strict";
  var bar = document.querySelector("header.bar");
  var button = bar && bar.querySelector(".nav-toggle");
  if (button) {
    bar.classList.add("collapsible");
    button.addEventListener("click", function () {
      var open = bar.classList.toggle("open");
      button.setAttribute("aria-expanded", open ? "true" : "false");
    });
  }

  function raised() {
    var shown = {};
    var items = document.querySelectorAll("#alarms li.alarm");
    for (var i = 0; i < items.length; i++) {
      var title = items[i].querySelector("strong");
      shown[items[i].getAttribute("data-alarm")] = title ? title.textContent : "";
    }
    return shown;
  }

  var before = null;
  function announce() {
    var news = document.getElementById("alarm-news");
    if (!news) {
      return;
    }
    var now = raised();
    if (before !== null) {
      var said = [];
      var key;
      for (key in now) {
        if (!(key in before)) {
          said.push("Alarm: " + now[key] + ".");
        }
      }
      for (key in before) {
        if (!(key in now)) {
          said.push("Cleared: " + before[key] + ".");
        }
      }
      if (said.length) {
        news.textContent = said.join(" ");
      }
    }
    before = now;
  }
  function heading(box) {
    for (var at = box.previousElementSibling; at; at = at.previousElementSibling) {
      if (/^H[1-3]$/.test(at.tagName)) {
        return at.textContent.trim();
      }
    }
    return document.title.split(" \u00b7 ")[0];
  }

  function scrollers() {
    var boxes = document.querySelectorAll(".table-wrap");
    for (var i = 0; i < boxes.length; i++) {
      var box = boxes[i];
      if (box.scrollWidth > box.clientWidth) {
        box.setAttribute("tabindex", "0");
        box.setAttribute("role", "region");
        box.setAttribute("aria-label", heading(box) + " (scrolls sideways)");
      } else if (box.getAttribute("role") === "region") {
        box.removeAttribute("tabindex");
        box.removeAttribute("role");
        box.removeAttribute("aria-label");
      }
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    announce();
    scrollers();
  });
  document.addEventListener("htmx:afterSettle", function () {
    announce();
    scrollers();
  });
  window.addEventListener("resize", scrollers);
})();
