/* Countersign pages: countdowns, the inbox keyboard, and keeping the operator's place across
   live refreshes. Everything here is an enhancement: every page works without it. */
(function () {
  "use strict";

  var selected = new Map(); // action pk -> the binding value the operator selected
  var currentId = null; // the inbox item J/K points at

  function $(selector, root) { return (root || document).querySelector(selector); }
  function $all(selector, root) { return Array.prototype.slice.call((root || document).querySelectorAll(selector)); }

  // --- Countdowns ------------------------------------------------------------------------
  function formatLeft(ms) {
    var seconds = Math.floor(ms / 1000);
    var days = Math.floor(seconds / 86400);
    var hours = Math.floor((seconds % 86400) / 3600);
    var minutes = Math.floor((seconds % 3600) / 60);
    var rest = seconds % 60;
    if (days > 0) return days + "d " + hours + "h";
    if (hours > 0) return hours + "h " + String(minutes).padStart(2, "0") + "m";
    return minutes + "m " + String(rest).padStart(2, "0") + "s";
  }

  function tick() {
    var now = Date.now();
    $all("[data-countdown]").forEach(function (element) {
      var left = Date.parse(element.getAttribute("datetime")) - now;
      var item = element.closest(".item");
      if (left <= 0) {
        element.textContent = "expired";
        element.classList.add("over");
        if (item) {
          item.classList.add("is-expired");
          $all("[data-approve], [data-approve-edit]", item).forEach(function (button) {
            button.disabled = true;
            button.title = "Expired: it can no longer be approved";
          });
        }
        return;
      }
      element.textContent = (item ? "expires in " : "in ") + formatLeft(left);
      element.classList.toggle("soon", left < 5 * 60 * 1000);
    });
  }

  // --- Selection -------------------------------------------------------------------------
  function items() { return $all("#inbox-list .item"); }

  function updateSelectionCount() {
    var counter = $("[data-selected-count]");
    if (!counter) return;
    counter.textContent = selected.size ? selected.size + " selected" : "Select with X or the checkboxes";
    counter.classList.toggle("has-selection", selected.size > 0);
  }

  function remember(checkbox) {
    var item = checkbox.closest(".item");
    if (!item) return;
    if (checkbox.checked) selected.set(item.dataset.action, checkbox.value);
    else selected.delete(item.dataset.action);
    item.classList.toggle("is-selected", checkbox.checked);
    updateSelectionCount();
  }

  // After a refresh: re-check what was selected. A request whose digest or version changed
  // meanwhile is unselected and flagged: the operator did not select what is shown now.
  function restoreSelection() {
    var present = new Set();
    items().forEach(function (item) {
      var id = item.dataset.action;
      var checkbox = $("input.select", item);
      present.add(id);
      if (!checkbox || !selected.has(id)) return;
      if (selected.get(id) === checkbox.value) {
        checkbox.checked = true;
        item.classList.add("is-selected");
      } else {
        selected.delete(id);
        item.classList.add("is-changed");
      }
    });
    selected.forEach(function (_, id) { if (!present.has(id)) selected.delete(id); });
    updateSelectionCount();
  }

  // --- Current item and keyboard ---------------------------------------------------------
  function setCurrent(item, focus) {
    items().forEach(function (other) { other.classList.remove("is-current"); });
    if (!item) { currentId = null; return; }
    currentId = item.id;
    item.classList.add("is-current");
    if (focus !== false) {
      item.focus({ preventScroll: true });
      item.scrollIntoView({ block: "nearest" });
    }
  }

  function current() { return currentId ? document.getElementById(currentId) : null; }

  function move(step) {
    var list = items();
    if (!list.length) return;
    var index = list.indexOf(current());
    var next = index < 0 ? (step > 0 ? 0 : list.length - 1) : Math.min(Math.max(index + step, 0), list.length - 1);
    setCurrent(list[next]);
  }

  function restoreCurrent() {
    var item = current();
    if (!item) return;
    item.classList.add("is-current");
    var active = document.activeElement;
    if (!active || active === document.body || !document.contains(active)) item.focus({ preventScroll: true });
  }

  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  }

  function onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var dialog = $("#keys-dialog");
    if (typing(event.target)) {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    var key = event.key;
    if (key === "?") { event.preventDefault(); if (dialog && !dialog.open) dialog.showModal(); return; }
    if (dialog && dialog.open) return;
    var item = current();
    switch (key) {
      case "j": case "J": event.preventDefault(); move(1); break;
      case "k": case "K": event.preventDefault(); move(-1); break;
      case "/": event.preventDefault(); var search = $(".filters input[name=q]"); if (search) search.focus(); break;
      case "a": case "A":
        if (!item) return;
        var approve = $("[data-approve]", item);
        if (approve && !approve.disabled) { event.preventDefault(); approve.click(); }
        break;
      case "r": case "R":
        if (!item) return;
        var reject = $("details[data-reject]", item);
        if (reject) { event.preventDefault(); reject.open = true; var preset = $("select", reject); if (preset) preset.focus(); }
        break;
      case "e": case "E":
        if (!item) return;
        var edit = $("[data-edit]", item);
        if (edit) { event.preventDefault(); edit.click(); }
        break;
      case "x": case "X":
        if (!item) return;
        var checkbox = $("input.select", item);
        if (checkbox) { event.preventDefault(); checkbox.checked = !checkbox.checked; remember(checkbox); }
        break;
      default:
        return;
    }
  }

  // --- Live refresh ----------------------------------------------------------------------
  // A poll never interrupts someone writing a reason, editing arguments or reading keys.
  function composing(list) {
    var active = document.activeElement;
    if (active && list.contains(active) && typing(active)) return true;
    if ($("details[open]", list) || $all(".edit-slot", list).some(function (slot) { return slot.children.length; })) return true;
    var dialog = $("#keys-dialog");
    return Boolean(dialog && dialog.open);
  }

  function openDetails(root) {
    return $all("details[open][id]", root).map(function (details) { return details.id; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    tick();
    setInterval(tick, 1000);
    if ($("[data-inbox]")) document.addEventListener("keydown", onKey);

    document.addEventListener("change", function (event) {
      if (event.target.matches("input.select")) remember(event.target);
      if (event.target.matches("select[data-autosubmit]")) event.target.form.requestSubmit();
    });
    document.addEventListener("focusin", function (event) {
      var item = event.target.closest && event.target.closest("#inbox-list .item");
      if (item && item.id !== currentId) setCurrent(item, false);
    });
    document.addEventListener("click", function (event) {
      var helpButton = event.target.closest("[data-show-keys]");
      if (helpButton) { var dialog = $("#keys-dialog"); if (dialog) dialog.showModal(); }
      var closeEdit = event.target.closest("[data-close-edit]");
      if (closeEdit) { var slot = closeEdit.closest(".edit-slot"); if (slot) slot.innerHTML = ""; }
    });

    var keptOpen = [];
    document.body.addEventListener("htmx:confirm", function (event) {
      var element = event.detail.elt;
      if (element.id === "inbox-list" && event.target === element && composing(element)) event.preventDefault();
    });
    document.body.addEventListener("htmx:beforeSwap", function (event) {
      keptOpen = openDetails(event.detail.target);
    });
    document.body.addEventListener("htmx:afterSettle", function () {
      keptOpen.forEach(function (id) { var details = document.getElementById(id); if (details) details.open = true; });
      keptOpen = [];
      restoreSelection();
      restoreCurrent();
      tick();
    });
    document.body.addEventListener("htmx:afterRequest", function (event) {
      if (event.detail.elt.id === "bulk-form" && event.detail.successful) {
        selected.clear();
        updateSelectionCount();
        var results = $("[data-bulk-results]");
        if (results) results.focus();
      }
    });
    document.body.addEventListener("htmx:responseError", function (event) {
      var toast = $("#toast");
      if (!toast) return;
      var status = event.detail.xhr.status;
      toast.textContent = status === 403 ? "Not allowed: your role here does not permit this."
        : status === 404 ? "Not found in this tenant: it may have moved on. Reload the page."
        : "The server answered " + status + ". Nothing changed on this page; try again.";
      toast.hidden = false;
      setTimeout(function () { toast.hidden = true; }, 6000);
    });
    document.body.addEventListener("htmx:sendError", function () {
      var toast = $("#toast");
      if (!toast) return;
      toast.textContent = "The server cannot be reached. Live refresh will retry.";
      toast.hidden = false;
      setTimeout(function () { toast.hidden = true; }, 6000);
    });
  });
})();
